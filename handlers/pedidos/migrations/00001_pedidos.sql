-- +goose Up
-- Seed 001's orders. A row is written by the HTTP routes with its events
-- in the same transaction. itens is the list the client sent, in its
-- order ([{"produto_id": 7, "quantidade": 2}]): it is read and written
-- whole, never queried by product.
CREATE TABLE pedidos_pedidos (
    id             BIGSERIAL PRIMARY KEY,
    itens          JSONB NOT NULL CHECK (jsonb_typeof(itens) = 'array' AND jsonb_array_length(itens) > 0),
    total_centavos BIGINT NOT NULL CHECK (total_centavos >= 0),
    status         TEXT NOT NULL CHECK (status IN ('criado', 'pago', 'cancelado')),
    criado_em      TIMESTAMPTZ NOT NULL,
    pago_em        TIMESTAMPTZ,
    cancelado_em   TIMESTAMPTZ
);

-- +goose Down
DROP TABLE pedidos_pedidos;
