-- +goose Up
-- How far a logical relay has published, kept with its slot's record and
-- written in the statement that settles each batch. PostgreSQL keeps a
-- slot's confirmed position in memory and saves it only now and then, so
-- after a crash of the server the slot resumes from further back than the
-- relay got; the relay starts its stream here instead, and repeats no more
-- than the batch it had in hand.
--   published_lsn: every transaction whose commit ends at or before it has
--     been published (or parked).
--   published_transaction_id, published_rows: of the transaction after
--     it, still being published when the batch was settled, the first
--     published_rows rows in stream order have been published too; none
--     when published_rows is 0.
-- A slot created again (dropped, or invalidated) starts without them.
ALTER TABLE moenda_outbox_slots
    ADD COLUMN published_lsn            pg_lsn,
    ADD COLUMN published_transaction_id xid8,
    ADD COLUMN published_rows           BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE moenda_outbox_slots
    DROP COLUMN published_lsn,
    DROP COLUMN published_transaction_id,
    DROP COLUMN published_rows;
