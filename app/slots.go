package app

import (
	"context"
	"time"

	"github.com/moenda/moenda/adapters/outbox"
)

// slotCheckInterval is how often serve reads the replication slots of
// its logical relays when metrics are off: a relay that stays down makes
// PostgreSQL keep WAL until the disk fills, and someone must hear of it.
const slotCheckInterval = 30 * time.Second

// slotWarnEvery is how often a slot that holds back too much WAL is
// warned about again.
const slotWarnEvery = 10 * time.Minute

// watchSlots reads the logical relays' slots until ctx ends: it sets
// their metrics, and warns while one keeps more WAL than
// outbox.slot_warn_size. Any process does it, standby or not: a slot
// grows precisely while no relay streams it.
func (p *Platform) watchSlots(ctx context.Context) {
	if p.reader == "" || p.reader == outbox.ReaderPoll {
		return
	}
	interval := slotCheckInterval
	if p.metrics != nil {
		interval = min(interval, p.cfg.Metrics.PollInterval)
	}
	warned := map[string]time.Time{}
	every(ctx, interval, func() {
		slots, err := outbox.Slots(ctx, p.pool)
		if err != nil {
			if ctx.Err() == nil {
				p.logger.Warn("outbox: could not read the replication slots; will try again", "error", err, "retry_in", interval)
			}
			return
		}
		p.checkSlots(slots, warned)
	})
}

// checkSlots sets the slots' metrics and warns of those past
// outbox.slot_warn_size, or invalidated, at most every slotWarnEvery each.
func (p *Platform) checkSlots(slots []outbox.Slot, warned map[string]time.Time) {
	limit := int64(p.cfg.Outbox.SlotWarnSize)
	for _, s := range slots {
		if p.metrics != nil {
			p.metrics.slotRetained.WithLabelValues(s.ConsumerGroup, s.Name).Set(float64(s.RetainedBytes))
			p.metrics.slotLag.WithLabelValues(s.ConsumerGroup, s.Name).Set(float64(s.LagBytes))
		}
		over := limit > 0 && s.RetainedBytes > limit || s.WALStatus == "lost"
		if !over {
			delete(warned, s.Name)
			continue
		}
		if time.Since(warned[s.Name]) < slotWarnEvery {
			continue
		}
		warned[s.Name] = time.Now()
		p.logger.Warn("outbox: a replication slot keeps WAL that no relay has confirmed: PostgreSQL keeps it until a relay of the group streams again"+
			" (start one), or the slot is dropped (`moenda outbox slots --drop NAME`, after which the relay reads the table instead); "+
			"max_slot_wal_keep_size bounds it on the server",
			"slot", s.Name, "consumer_group", s.ConsumerGroup, "active", s.Active, "retained", outbox.ByteSize(s.RetainedBytes),
			"lag", outbox.ByteSize(s.LagBytes), "wal_status", s.WALStatus, "outbox.slot_warn_size", p.cfg.Outbox.SlotWarnSize)
	}
}
