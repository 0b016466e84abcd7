-- +goose Up
-- How each consumer group's relays read the outbox (outbox.reader:
-- logical or poll), decided once for the group and kept with its
-- position: a relay that would read another way stands by rather than
-- publish beside the group's leader. NULL (a group from before this
-- column, or one whose relays have not yet led) is decided by the
-- group's next leader.
ALTER TABLE watermill_offsets_outbox ADD COLUMN reader TEXT CHECK (reader IN ('logical', 'poll'));

-- +goose Down
ALTER TABLE watermill_offsets_outbox DROP COLUMN reader;
