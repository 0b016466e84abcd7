-- +goose Up
-- The failure ledger's counts, so that the pages over a ledger of a
-- million failures read a few hundred rows, not the million: for each
-- cause (fingerprint, handler, reason), failed queue, event type and
-- status, how many failures there are, their first and last failure, and
-- the latest one's id and error. Triggers keep them in the transaction
-- that changes the failures, one statement at a time, so n is exact. The
-- bounds only widen there: a key that lost a failure is marked stale, and
-- the ledger recomputes its bounds from the failures when it reads it.
CREATE TABLE moenda_failure_counts (
    fingerprint      TEXT NOT NULL,
    handler          TEXT NOT NULL,
    reason           TEXT NOT NULL,
    failed_queue     TEXT NOT NULL,
    event_name       TEXT NOT NULL,
    status           TEXT NOT NULL,
    n                BIGINT NOT NULL,
    first_failure_at TIMESTAMPTZ NOT NULL,
    last_failure_at  TIMESTAMPTZ NOT NULL,
    last_id          BIGINT NOT NULL,
    last_error       TEXT NOT NULL,
    stale            BOOLEAN NOT NULL,
    PRIMARY KEY (fingerprint, handler, reason, failed_queue, event_name, status)
);

-- Every change of a statement is one upsert: each failure added counts
-- +1 under its key and each one removed -1 (an update is both, unless it
-- changes nothing counted). Keys are upserted in their order, so two
-- writers lock them in the same order. A key left at 0 is deleted.
-- +goose StatementBegin
CREATE FUNCTION moenda_failure_counts_track() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    changes text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE moenda_failure_counts;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- most updates move nothing (a dead letter read again, a re-drive's
        -- bookkeeping): those cost one look at the rows
        PERFORM FROM new_rows n JOIN old_rows o USING (id)
        WHERE (n.fingerprint, n.handler, n.reason, n.failed_queue, n.event_name, n.status, n.first_failure_at,
            n.last_failure_at, n.error) IS DISTINCT FROM (o.fingerprint, o.handler, o.reason, o.failed_queue,
            o.event_name, o.status, o.first_failure_at, o.last_failure_at, o.error)
        LIMIT 1;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    changes := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT 1 AS d, * FROM new_rows'
        WHEN 'DELETE' THEN 'SELECT -1 AS d, * FROM old_rows'
        ELSE 'WITH moved AS (
                SELECT n, o FROM new_rows n JOIN old_rows o USING (id)
                WHERE (n.fingerprint, n.handler, n.reason, n.failed_queue, n.event_name, n.status, n.first_failure_at,
                    n.last_failure_at, n.error) IS DISTINCT FROM (o.fingerprint, o.handler, o.reason, o.failed_queue,
                    o.event_name, o.status, o.first_failure_at, o.last_failure_at, o.error))
            SELECT 1 AS d, (n).* FROM moved UNION ALL SELECT -1, (o).* FROM moved'
    END;
    EXECUTE format($q$
        INSERT INTO moenda_failure_counts AS s
        SELECT fingerprint, handler, reason, failed_queue, event_name, status, sum(d),
            coalesce(min(first_failure_at) FILTER (WHERE d > 0), 'infinity'),
            coalesce(max(last_failure_at) FILTER (WHERE d > 0), '-infinity'),
            coalesce(max(id) FILTER (WHERE d > 0), 0),
            coalesce((array_agg(error ORDER BY id DESC) FILTER (WHERE d > 0))[1], ''),
            bool_or(d < 0)
        FROM (%s) c
        GROUP BY 1, 2, 3, 4, 5, 6
        ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (fingerprint, handler, reason, failed_queue, event_name, status) DO UPDATE SET
            n = s.n + excluded.n,
            first_failure_at = least(s.first_failure_at, excluded.first_failure_at),
            last_failure_at = greatest(s.last_failure_at, excluded.last_failure_at),
            last_id = greatest(s.last_id, excluded.last_id),
            last_error = CASE WHEN excluded.last_id > s.last_id THEN excluded.last_error ELSE s.last_error END,
            stale = s.stale OR excluded.stale$q$, changes);
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM moenda_failure_counts WHERE n <= 0;
    END IF;
    RETURN NULL;
END
$fn$;
-- +goose StatementEnd

CREATE TRIGGER moenda_failure_counts_insert AFTER INSERT ON moenda_failures
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION moenda_failure_counts_track();
CREATE TRIGGER moenda_failure_counts_update AFTER UPDATE ON moenda_failures
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION moenda_failure_counts_track();
CREATE TRIGGER moenda_failure_counts_delete AFTER DELETE ON moenda_failures
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION moenda_failure_counts_track();
CREATE TRIGGER moenda_failure_counts_truncate AFTER TRUNCATE ON moenda_failures
    FOR EACH STATEMENT EXECUTE FUNCTION moenda_failure_counts_track();

-- The failures already there; the triggers above hold the table's lock
-- from here to the commit, so none is written in between.
INSERT INTO moenda_failure_counts
SELECT fingerprint, handler, reason, failed_queue, event_name, status, count(*), min(first_failure_at),
    max(last_failure_at), max(id), (array_agg(error ORDER BY id DESC))[1], false
FROM moenda_failures
GROUP BY 1, 2, 3, 4, 5, 6;

-- +goose Down
DROP TRIGGER moenda_failure_counts_insert ON moenda_failures;
DROP TRIGGER moenda_failure_counts_update ON moenda_failures;
DROP TRIGGER moenda_failure_counts_delete ON moenda_failures;
DROP TRIGGER moenda_failure_counts_truncate ON moenda_failures;
DROP FUNCTION moenda_failure_counts_track();
DROP TABLE moenda_failure_counts;
