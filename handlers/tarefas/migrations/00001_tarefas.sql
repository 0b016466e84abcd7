-- +goose Up
-- Tasks of the Tarefas API (seed 002). A subtask points at its parent; a
-- task cannot be concluded while a subtask is pending. IF NOT EXISTS: the
-- platform's own migrations created this table before the plugin kept
-- its migrations in its folder.
CREATE TABLE IF NOT EXISTS tarefas (
    id            BIGSERIAL PRIMARY KEY,
    usuario_id    BIGINT NOT NULL,
    titulo        TEXT NOT NULL CHECK (titulo <> ''),
    concluida     BOOLEAN NOT NULL DEFAULT FALSE,
    criada_em     TIMESTAMPTZ NOT NULL DEFAULT now(),
    concluida_em  TIMESTAMPTZ,
    tarefa_pai_id BIGINT REFERENCES tarefas (id)
);
CREATE INDEX IF NOT EXISTS tarefas_tarefa_pai_id ON tarefas (tarefa_pai_id) WHERE tarefa_pai_id IS NOT NULL;

-- +goose Down
DROP TABLE tarefas;
