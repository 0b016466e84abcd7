-- +goose Up
-- A relay also parks a row the broker refused for good (larger than its
-- record limit, a record it calls invalid), instead of sending its batch
-- again forever. The constraint's name is PostgreSQL's default for a
-- column constraint.
ALTER TABLE moenda_outbox_parked DROP CONSTRAINT moenda_outbox_parked_reason_check,
    ADD CONSTRAINT moenda_outbox_parked_reason_check CHECK (reason IN ('no_event', 'unroutable', 'refused'));

-- +goose Down
DELETE FROM moenda_outbox_parked WHERE reason = 'refused';
ALTER TABLE moenda_outbox_parked DROP CONSTRAINT moenda_outbox_parked_reason_check,
    ADD CONSTRAINT moenda_outbox_parked_reason_check CHECK (reason IN ('no_event', 'unroutable'));
