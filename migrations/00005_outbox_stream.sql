-- +goose Up
-- The logical reader of the outbox relay (outbox.reader) streams the
-- outbox's inserts in commit order through this publication, one
-- replication slot per consumer group. Creating a publication needs no
-- particular wal_level; streaming it needs wal_level=logical.
CREATE PUBLICATION moenda_outbox FOR TABLE watermill_outbox WITH (publish = 'insert');

-- Each consumer group that streams: its slot, and what ties the stream to
-- the group's position in watermill_offsets_outbox, which stays the one
-- every reader, retention and lag understand.
--   backfill: while set, the rows after the group's position that this
--     snapshot sees (those committed before the slot's consistent point)
--     are still to be read from the table; backfill_transaction_id and
--     backfill_offset say how far that has got. The stream carries every
--     later commit.
--   sample_xmin, sample_lsn: read together, so every transaction below
--     sample_xmin had ended when the WAL reached sample_lsn. Once the
--     stream is confirmed past sample_lsn, the group's position moves to
--     (sample_xmin, 0): a polling reader starting there skips nothing.
CREATE TABLE moenda_outbox_slots (
    consumer_group          VARCHAR(255) PRIMARY KEY,
    slot_name               TEXT NOT NULL UNIQUE,
    backfill                pg_snapshot,
    backfill_transaction_id xid8 NOT NULL DEFAULT '0',
    backfill_offset         BIGINT NOT NULL DEFAULT 0,
    sample_xmin             xid8,
    sample_lsn              pg_lsn,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE moenda_outbox_slots;
DROP PUBLICATION moenda_outbox;
