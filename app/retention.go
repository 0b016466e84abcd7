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
	p.pruneEvery(ctx, "outbox", "published rows", interval, retention, func(ctx context.Context, cutoff time.Time) (int, error) {
		if !slices.ContainsFunc(p.relays, (*outbox.Relay).Active) {
			return 0, nil
		}
		return outbox.Prune(ctx, p.pool, groups, cutoff, outboxPruneBatch)
	}, "consumer_groups", groups)
}

// pruneEvery deletes, every interval, what prune finds older than
// retention (given as the cutoff), until ctx ends, and logs what it did:
// of what, in the words of the part that keeps it.
func (p *Platform) pruneEvery(ctx context.Context, part, what string, interval, retention time.Duration, prune func(ctx context.Context, cutoff time.Time) (int, error), attrs ...any) {
	every(ctx, interval, func() {
		n, err := prune(ctx, time.Now().Add(-retention))
		switch {
		case err != nil && ctx.Err() == nil:
			p.logger.Warn(part+": pruning "+what+" failed; will try again", append(attrs, "error", err, "deleted", n, "retry_in", interval)...)
		case n > 0:
			p.logger.Info(part+": pruned "+what, append(attrs, "deleted", n, "retention", retention)...)
		}
	})
}
