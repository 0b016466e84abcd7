package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lag is how far a consumer group's relay is behind the outbox: the rows
// committed after its position, and the age of the oldest of them (zero
// when there is none). It counts the backlog, so read it every few
// seconds, not per request.
func Lag(ctx context.Context, pool *pgxpool.Pool, group string) (rows int64, oldest time.Duration, err error) {
	var secs float64
	err = pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(o.created_at)), 0)::float8
		FROM watermill_outbox o
		LEFT JOIN watermill_offsets_outbox p ON p.consumer_group = $1
		WHERE (o.transaction_id, o."offset") > (COALESCE(p.last_processed_transaction_id, '0'), COALESCE(p.offset_acked, 0))`, group).Scan(&rows, &secs)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: lag of %s: %w", group, err)
	}
	return rows, time.Duration(secs * float64(time.Second)), nil
}

// Group is the consumer group whose position the relay keeps.
func (r *Relay) Group() string { return r.cfg.ConsumerGroup }
