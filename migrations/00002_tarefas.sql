-- +goose Up
-- Tasks of the Tarefas API (seed 002). A subtask points at its parent; a
-- task cannot be concluded while a subtask is pending.
CREATE TABLE tarefas (
    id            BIGSERIAL PRIMARY KEY,
    usuario_id    BIGINT NOT NULL,
    titulo        TEXT NOT NULL CHECK (titulo <> ''),
    concluida     BOOLEAN NOT NULL DEFAULT FALSE,
    criada_em     TIMESTAMPTZ NOT NULL DEFAULT now(),
    concluida_em  TIMESTAMPTZ,
    tarefa_pai_id BIGINT REFERENCES tarefas (id)
);
CREATE INDEX tarefas_tarefa_pai_id ON tarefas (tarefa_pai_id) WHERE tarefa_pai_id IS NOT NULL;

-- +goose Down
DROP TABLE tarefas;
