-- +goose Up
-- Reminders, and whether the consumer of lembrete.criado has seen each.
CREATE TABLE lembretes (
    id      BIGSERIAL PRIMARY KEY,
    texto   TEXT NOT NULL,
    visto   TEXT
);

-- +goose Down
DROP TABLE lembretes;
