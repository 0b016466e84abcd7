-- +goose Up
-- The inbox: which events each consumer has processed. A consumer (a queue
-- name, or an HTTP route that accepts events) claims an event id in the
-- same transaction as its effects, so a redelivered event is recognised
-- and skipped, and a rolled-back attempt leaves no claim behind. event_id
-- is text: a foreign envelope's id, or a client's idempotency key, need not
-- be a UUID. fingerprint and answer are kept by consumers that repeat
-- their first answer to a client that retries (POST /v1/events).
CREATE TABLE moenda_inbox (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL CHECK (length(event_id) <= 200),
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    fingerprint  BYTEA,
    answer       JSONB,
    PRIMARY KEY (consumer, event_id)
);
-- Retention deletes the oldest claims in small batches.
CREATE INDEX moenda_inbox_processed_at ON moenda_inbox (processed_at);

-- +goose Down
DROP TABLE moenda_inbox;
