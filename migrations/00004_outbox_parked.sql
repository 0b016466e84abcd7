-- +goose Up
-- Outbox rows a relay moved past without publishing them: their metadata
-- names no event, or no exchange carries their routing key. The relay
-- writes them here in the statement that records its new position, so a
-- parked row is never lost, and the key lists it once per consumer group.
-- `moenda outbox republish` publishes those the configuration now routes
-- and deletes them here; outbox retention never deletes a row listed here.
-- The key leads with the outbox row's own key, which retention looks up.
CREATE TABLE moenda_outbox_parked (
    transaction_id xid8 NOT NULL,
    "offset"       BIGINT NOT NULL,
    consumer_group VARCHAR(255) NOT NULL,
    event_id       TEXT NOT NULL,
    event_name     TEXT NOT NULL,
    routing_key    TEXT NOT NULL,
    reason         TEXT NOT NULL CHECK (reason IN ('no_event', 'unroutable')),
    detail         TEXT NOT NULL,
    parked_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (transaction_id, "offset", consumer_group)
);

-- +goose Down
DROP TABLE moenda_outbox_parked;
