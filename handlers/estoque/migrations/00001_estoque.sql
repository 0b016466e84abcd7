-- +goose Up
-- Seed 001's stock service. One reservation per pedido, keyed by the
-- pedido id and not by the event id: pedido.criado v1 and v2 of one
-- creation, or a redelivery under another event id, find the row and
-- reserve nothing more. A pedido.cancelado that arrives first writes the
-- row released and with no items, so the creation reserves nothing.
CREATE TABLE estoque_reservas (
    pedido_id   BIGINT PRIMARY KEY CHECK (pedido_id > 0),
    liberada    BOOLEAN NOT NULL,
    criada_em   TIMESTAMPTZ NOT NULL,
    liberada_em TIMESTAMPTZ,
    CHECK (liberada = (liberada_em IS NOT NULL))
);

CREATE TABLE estoque_reserva_itens (
    pedido_id  BIGINT NOT NULL REFERENCES estoque_reservas (pedido_id),
    produto_id BIGINT NOT NULL CHECK (produto_id > 0),
    quantidade INTEGER NOT NULL CHECK (quantidade > 0),
    PRIMARY KEY (pedido_id, produto_id)
);
CREATE INDEX estoque_reserva_itens_produto_id ON estoque_reserva_itens (produto_id);

-- +goose Down
DROP TABLE estoque_reserva_itens;
DROP TABLE estoque_reservas;
