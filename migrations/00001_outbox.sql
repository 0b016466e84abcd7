-- +goose Up
-- The outbox, in watermill-sql's PostgreSQL layout for topic "outbox":
-- rows are read in (transaction_id, offset) order and only once every
-- transaction that could still insert before them has finished. The
-- payload is BYTEA, watermill-sql's option for opaque payloads: it holds
-- the forwarder's envelope, and PostgreSQL need not parse it on insert.
CREATE TABLE watermill_outbox (
    "offset"       BIGSERIAL,
    uuid           VARCHAR(36) NOT NULL,
    created_at     TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    payload        BYTEA DEFAULT NULL,
    metadata       JSON DEFAULT NULL,
    transaction_id xid8 NOT NULL,
    PRIMARY KEY (transaction_id, "offset")
);

-- Where each consumer group of the outbox (the forwarder) has got to.
CREATE TABLE watermill_offsets_outbox (
    consumer_group                VARCHAR(255) NOT NULL,
    offset_acked                  BIGINT,
    last_processed_transaction_id xid8 NOT NULL,
    PRIMARY KEY (consumer_group)
);

-- +goose Down
DROP TABLE watermill_offsets_outbox;
DROP TABLE watermill_outbox;
