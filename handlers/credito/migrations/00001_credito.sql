-- +goose Up
-- Seed 004's analysis-service: the CPFs whose rentals are refused, and one
-- analysis per rental (a second request for one rental is answered by the
-- first analysis, never analysed twice).
CREATE TABLE credito_cpfs_bloqueados (
    cpf       CHAR(11) PRIMARY KEY CHECK (cpf ~ '^[0-9]{11}$'),
    motivo    TEXT NOT NULL CHECK (motivo <> ''),
    criado_em TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE credito_analises (
    rental_id    UUID PRIMARY KEY,
    resultado    TEXT NOT NULL CHECK (resultado IN ('APPROVED', 'REJECTED')),
    motivo       TEXT,
    event_id     UUID NOT NULL,
    analisado_em TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE credito_analises;
DROP TABLE credito_cpfs_bloqueados;
