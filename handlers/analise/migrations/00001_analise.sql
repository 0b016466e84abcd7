-- +goose Up
-- Seed 001's analytics: every pedido event, once by its event id (a
-- redelivery the inbox let through records nothing). tipo is the routing
-- key (pedido.criado), versao the name's .vN, so v1 and v2 of one creation
-- are two rows of one tipo and one pedido, and count once.
CREATE TABLE analise_eventos (
    event_id      TEXT PRIMARY KEY,
    tipo          TEXT NOT NULL CHECK (tipo <> ''),
    versao        INTEGER NOT NULL CHECK (versao > 0),
    pedido_id     BIGINT CHECK (pedido_id > 0),
    ocorrido_em   TIMESTAMPTZ NOT NULL,
    registrado_em TIMESTAMPTZ NOT NULL
);
CREATE INDEX analise_eventos_tipo_pedido_id ON analise_eventos (tipo, pedido_id);

-- +goose Down
DROP TABLE analise_eventos;
