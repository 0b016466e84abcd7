-- +goose Up
-- Re-drives: failures of the ledger sent back to the queues that failed
-- them. A re-drive's items are its selection, frozen when it was made, in
-- the order they are sent; an item is marked sending before it is sent and
-- sent once the broker has it, so a re-drive resumed after a crash knows
-- which it must send again.
CREATE TABLE moenda_redrives (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor      TEXT NOT NULL,
    selection  JSONB NOT NULL,
    target     TEXT NOT NULL,
    rate       DOUBLE PRECISION NOT NULL CHECK (rate >= 0),
    canary     INTEGER NOT NULL CHECK (canary >= 0),
    state      TEXT NOT NULL CHECK (state IN ('canary', 'running', 'paused', 'cancelled', 'done')),
    reason     TEXT NOT NULL DEFAULT ''
);
CREATE TABLE moenda_redrive_items (
    redrive_id BIGINT NOT NULL REFERENCES moenda_redrives (id),
    seq        INTEGER NOT NULL,
    failure_id BIGINT NOT NULL,
    queue      TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'sending', 'sent', 'handled', 'failed_again', 'skipped', 'unsettled')),
    reason     TEXT NOT NULL DEFAULT '',
    sent_at    TIMESTAMPTZ,
    PRIMARY KEY (redrive_id, seq)
);
CREATE INDEX moenda_redrive_items_state ON moenda_redrive_items (redrive_id, state, seq);
CREATE INDEX moenda_redrive_items_event_id ON moenda_redrive_items (event_id);

-- +goose Down
DROP TABLE moenda_redrive_items;
DROP TABLE moenda_redrives;
