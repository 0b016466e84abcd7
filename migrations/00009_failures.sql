-- +goose Up
-- The failure ledger: every dead letter read from a dead-letter queue,
-- once per (queue, event_id), so a delivery read again after a crash
-- before its acknowledgement adds nothing. A failure re-driven and
-- dead-lettered again stays one row, its occurrences counted. body and
-- headers are the dead letter as it was; the columns beside them are the
-- headers the ledger is filtered and grouped on. Pages follow id, newest
-- first, so each filter has an index that ends in id.
CREATE TABLE moenda_failures (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue                TEXT NOT NULL,
    event_id             TEXT NOT NULL,
    failed_queue         TEXT NOT NULL,
    handler              TEXT NOT NULL,
    event_name           TEXT NOT NULL,
    correlation_id       TEXT NOT NULL,
    reason               TEXT NOT NULL,
    error                TEXT NOT NULL,
    fingerprint          TEXT NOT NULL,
    attempts             INTEGER NOT NULL,
    occurrences          INTEGER NOT NULL DEFAULT 1,
    redrives             INTEGER NOT NULL DEFAULT 0,
    redrive_id           BIGINT NOT NULL DEFAULT 0,
    first_failure_at     TIMESTAMPTZ NOT NULL,
    last_failure_at      TIMESTAMPTZ NOT NULL,
    recorded_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    status               TEXT NOT NULL DEFAULT 'unresolved'
                         CHECK (status IN ('unresolved', 'redriving', 'resolved', 'archived')),
    original_exchange    TEXT NOT NULL,
    original_routing_key TEXT NOT NULL,
    headers              JSONB NOT NULL,
    body                 BYTEA NOT NULL,
    UNIQUE (queue, event_id)
);
CREATE INDEX moenda_failures_status ON moenda_failures (status, id);
CREATE INDEX moenda_failures_fingerprint ON moenda_failures (fingerprint, id);
CREATE INDEX moenda_failures_failed_queue ON moenda_failures (failed_queue, id);
CREATE INDEX moenda_failures_reason ON moenda_failures (reason, id);
CREATE INDEX moenda_failures_event_name ON moenda_failures (event_name, id);
CREATE INDEX moenda_failures_correlation_id ON moenda_failures (correlation_id);
CREATE INDEX moenda_failures_event_id ON moenda_failures (event_id);

-- +goose Down
DROP TABLE moenda_failures;
