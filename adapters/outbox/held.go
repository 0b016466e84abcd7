package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// heldCheckInterval is how often a polling relay that finds nothing to
// read asks whether committed rows wait behind an open transaction.
const heldCheckInterval = 5 * time.Second

// heldBack tells the operator why a polling relay delivers nothing while
// rows are committed: it reads only below the oldest transaction open on
// the server, anywhere. When two checks in a row find rows waiting behind
// the same transaction, it logs a WARN naming its backend, once per
// backend.
type heldBack struct {
	checked time.Time
	pid     int32 // the backend holding it back at the last check
	warned  int32 // the backend last warned about
}

// heldQuery finds the oldest open transaction with a transaction id,
// when rows after the position ($1, $2) wait behind one.
const heldQuery = `SELECT a.pid, COALESCE(a.datname, ''), COALESCE(a.state, ''), COALESCE(EXTRACT(EPOCH FROM now() - a.xact_start), 0)::float8,
		left(COALESCE(a.query, ''), 200)
	FROM pg_stat_activity a
	WHERE a.backend_xid IS NOT NULL AND EXISTS (SELECT 1 FROM ` + lastRow + `
		WHERE (l.transaction_id, l."offset") > ($1::text::xid8, $2) AND l.transaction_id >= pg_snapshot_xmin(pg_current_snapshot()))
	ORDER BY age(a.backend_xid) DESC
	LIMIT 1`

// moved forgets the backend the last check found, once the relay has read
// rows again: two checks find rows waiting behind the same backend "in a
// row" only with no rows read between them. When it last checked stays:
// under load, where reads that find rows and reads that find none
// alternate, the check still runs at most every heldCheckInterval, where
// a relay that forgot it too asked pg_stat_activity after nearly every
// empty read.
func (h *heldBack) moved() { h.pid = 0 }

// check runs at most every heldCheckInterval, after an empty read from
// pos on conn.
func (h *heldBack) check(ctx context.Context, p *polling, conn *pgx.Conn, pos position) error {
	if time.Since(h.checked) < heldCheckInterval {
		return nil
	}
	h.checked = time.Now()
	var pid int32
	var db, state, query string
	var open float64
	p.queries.Add(1)
	err := conn.QueryRow(ctx, heldQuery, fmt.Sprint(pos.txID), pos.offset).Scan(&pid, &db, &state, &open, &query)
	if errors.Is(err, pgx.ErrNoRows) {
		h.pid = 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("what holds the outbox back: %w", err)
	}
	if pid == h.pid && pid != h.warned {
		h.warned = pid
		p.logger.Warn("outbox relay: committed events wait behind a transaction that is still open: the polling reader reads only rows older than "+
			"the oldest transaction open on the server, in any database; end it, or use outbox.reader: logical, which does not wait",
			"blocking_pid", pid, "database", db, "state", state, "open_for", time.Duration(open*float64(time.Second)).Round(time.Second), "query", query)
	}
	h.pid = pid
	return nil
}
