-- +goose Up
-- The fault-injection suite's consumer. Its effect is not idempotent on
-- purpose: an event applied twice leaves two rows here (no unique key),
-- and the counter counts every application, so a failure of the inbox
-- shows instead of being absorbed.
CREATE TABLE faultprobe_efeitos (
    event_id   TEXT NOT NULL,
    writer     INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    aggregate  TEXT NOT NULL,
    nota       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE faultprobe_contador (n BIGINT NOT NULL);
INSERT INTO faultprobe_contador VALUES (0);

-- +goose Down
DROP TABLE faultprobe_contador;
DROP TABLE faultprobe_efeitos;
