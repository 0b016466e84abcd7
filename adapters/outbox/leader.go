package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Leader is the database session through which a consumer group's relay
// leads, as PostgreSQL shows it: enough for an operator to tell which
// process it is.
type Leader struct {
	// PID is the session's backend process on the server.
	PID int `json:"pid"`
	// Application is the session's application_name: moenda's sessions
	// name their host and process (postgres.Connect).
	Application string `json:"application"`
	// ClientAddr is the address the session connects from; empty over a
	// Unix socket.
	ClientAddr string `json:"client_addr"`
	// Since is when the session connected.
	Since time.Time `json:"since"`
}

// GroupState is what the database says of a consumer group's relays.
type GroupState struct {
	// Reader is the reader recorded with the group's position; empty
	// until a relay of the group has led.
	Reader string
	// Leader is the session streaming the group's slot, or else the one
	// holding its relay lock; nil while none does (no relay leads), or
	// when the server hides other roles' sessions.
	Leader *Leader
}

// State reads group's recorded reader and its leading session, in one
// statement: the same marks the relays lead by (the slot a logical relay
// streams, the advisory lock a polling one holds), so it cannot disagree
// with them.
func State(ctx context.Context, pool *pgxpool.Pool, group string) (GroupState, error) {
	key := uint64(LockKey(group))
	var (
		reader, app, addr *string
		pid               *int32
		since             *time.Time
	)
	err := pool.QueryRow(ctx, `
		WITH lead AS (SELECT COALESCE(
			(SELECT p.active_pid FROM moenda_outbox_slots s JOIN pg_replication_slots p ON p.slot_name = s.slot_name
				WHERE s.consumer_group = $1 AND p.active LIMIT 1),
			(SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $2 AND l.objid = $3 AND l.objsubid = 1
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1)) AS pid)
		SELECT (SELECT reader FROM watermill_offsets_outbox WHERE consumer_group = $1),
			a.pid, a.application_name, host(a.client_addr), a.backend_start
		FROM lead LEFT JOIN pg_stat_activity a ON a.pid = lead.pid`,
		group, uint32(key>>32), uint32(key)).Scan(&reader, &pid, &app, &addr, &since)
	if err != nil {
		return GroupState{}, fmt.Errorf("outbox: state of %s: %w", group, err)
	}
	var st GroupState
	if reader != nil {
		st.Reader = *reader
	}
	if pid != nil {
		st.Leader = &Leader{PID: int(*pid), Application: deref(app), ClientAddr: deref(addr)}
		if since != nil {
			st.Leader.Since = *since
		}
	}
	return st, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
