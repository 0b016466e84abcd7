-- +goose Up
-- The counter is split over 16 rows, picked by each event's writer and
-- sequence number. With one row, every delivery's transaction waited for
-- the one before it to commit, so the probe, not moenda, set how fast a
-- backlog drained after an outage. Its total still counts every
-- application.
ALTER TABLE faultprobe_contador ADD COLUMN shard INTEGER NOT NULL DEFAULT 0 PRIMARY KEY;
INSERT INTO faultprobe_contador (shard, n) SELECT s, 0 FROM generate_series(1, 15) AS s;

-- +goose Down
DELETE FROM faultprobe_contador WHERE shard <> 0;
ALTER TABLE faultprobe_contador DROP COLUMN shard;
