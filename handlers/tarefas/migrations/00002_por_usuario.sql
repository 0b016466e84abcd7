-- +goose Up
-- GET /tarefas lists one user's tasks newest first, a page at a time.
CREATE INDEX IF NOT EXISTS tarefas_usuario_id_id ON tarefas (usuario_id, id DESC);

-- +goose Down
DROP INDEX tarefas_usuario_id_id;
