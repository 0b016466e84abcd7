-- +goose Up
-- The audit: who did what to the platform through its administration,
-- and what came of it, refusals included. Rows are only ever added: the
-- platform has no statement that changes or deletes one.
CREATE TABLE moenda_audit (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor          TEXT NOT NULL,
    role           TEXT NOT NULL,
    action         TEXT NOT NULL,
    selection      JSONB NOT NULL,
    outcome        TEXT NOT NULL CHECK (outcome IN ('done', 'refused', 'failed')),
    detail         JSONB NOT NULL,
    correlation_id TEXT NOT NULL
);
CREATE INDEX moenda_audit_actor ON moenda_audit (actor, id);
CREATE INDEX moenda_audit_action ON moenda_audit (action, id);

-- +goose Down
DROP TABLE moenda_audit;
