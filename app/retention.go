package app

import (
	"context"
	"slices"
	"time"

	"github.com/moenda/moenda/adapters/outbox"
)

// outboxPruneBatch is how many outbox rows one retention transaction
// deletes: each delete holds back the relays' reads of newer rows while
// it runs (the outbox's visibility rule), so it must stay short.
const outboxPruneBatch = 1000

// pruneOutbox deletes, every outbox.retention_interval, the outbox rows
// that every relay of this configuration has published and that are older
// than outbox.retention, until ctx ends. It prunes only while one of this
// process's relays is active, so replicas on standby leave it to the
// leader; pruning from two processes at once would still be safe.
func (p *Platform) pruneOutbox(ctx context.Context) {
	retention, interval := p.cfg.Outbox.Retention, p.cfg.Outbox.RetentionInterval
	if p.pool == nil || len(p.relays) == 0 || retention == 0 {
		return
	}
	groups := make([]string, len(p.relays))
	for i, r := range p.relays {
		groups[i] = r.Group()
	}
	every(ctx, interval, func() {
		if !slices.ContainsFunc(p.relays, (*outbox.Relay).Active) {
			return
		}
		n, err := outbox.Prune(ctx, p.pool, groups, time.Now().Add(-retention), outboxPruneBatch)
		switch {
		case err != nil && ctx.Err() == nil:
			p.logger.Warn("outbox: pruning published rows failed; will try again", "error", err, "deleted", n, "retry_in", interval)
		case n > 0:
			p.logger.Info("outbox: pruned published rows", "deleted", n, "retention", retention, "consumer_groups", groups)
		}
	})
}
