-- +goose Up
-- Edited failures: an operator's edit of a failure's body is a new row,
-- linked both ways (edit_of on the edit, edited_by on the original; 0 is
-- none), so the original stays as it was read from its dead-letter queue.
-- The original is 'edited' and leaves the live rows: the edit keeps its
-- queue and event id, so (queue, event_id) is unique among the live rows
-- only, and a later dead letter of the event lands on the edit.
ALTER TABLE moenda_failures
    ADD COLUMN edit_of   BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN edited_by BIGINT NOT NULL DEFAULT 0;
ALTER TABLE moenda_failures DROP CONSTRAINT moenda_failures_status_check;
ALTER TABLE moenda_failures ADD CONSTRAINT moenda_failures_status_check
    CHECK (status IN ('unresolved', 'redriving', 'resolved', 'archived', 'edited'));
ALTER TABLE moenda_failures DROP CONSTRAINT moenda_failures_queue_event_id_key;
CREATE UNIQUE INDEX moenda_failures_live ON moenda_failures (queue, event_id) WHERE status <> 'edited';

-- +goose Down
DELETE FROM moenda_failures WHERE status = 'edited';
DROP INDEX moenda_failures_live;
ALTER TABLE moenda_failures ADD CONSTRAINT moenda_failures_queue_event_id_key UNIQUE (queue, event_id);
ALTER TABLE moenda_failures DROP CONSTRAINT moenda_failures_status_check;
ALTER TABLE moenda_failures ADD CONSTRAINT moenda_failures_status_check
    CHECK (status IN ('unresolved', 'redriving', 'resolved', 'archived'));
ALTER TABLE moenda_failures DROP COLUMN edited_by, DROP COLUMN edit_of;
