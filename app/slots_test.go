package app

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/moenda/moenda/adapters/outbox"
	"github.com/moenda/moenda/adapters/testenv"
)

// A slot past outbox.slot_warn_size, or invalidated, is warned about once
// per slotWarnEvery; one back under the size is warned about again when it
// grows past it again. The metrics follow every reading.
func TestSlotsPastTheirSizeAreWarnedAbout(t *testing.T) {
	logs := &testenv.Buffer{}
	cfg := &Resolved{Config: &Config{}}
	cfg.Outbox.SlotWarnSize = 1 << 20
	p := &Platform{resources: &resources{cfg: cfg, logger: slog.New(slog.NewTextHandler(logs, nil))}, metrics: newMetrics()}
	warned := map[string]time.Time{}
	big := outbox.Slot{Name: "moenda_db__moenda_relay", ConsumerGroup: "moenda-relay", RetainedBytes: 3 << 20, LagBytes: 2 << 20, WALStatus: "reserved"}
	small := outbox.Slot{Name: "moenda_db__moenda_relay_kafka", ConsumerGroup: "moenda-relay-kafka", RetainedBytes: 1 << 10, WALStatus: "reserved"}
	count := func() int { return strings.Count(logs.String(), "level=WARN") }

	p.checkSlots([]outbox.Slot{big, small}, warned)
	p.checkSlots([]outbox.Slot{big, small}, warned)
	if n := count(); n != 1 || !strings.Contains(logs.String(), "slot=moenda_db__moenda_relay ") || !strings.Contains(logs.String(), "retained=3MB") {
		t.Fatalf("%d warnings:\n%s", n, logs)
	}
	if got := testutil.ToFloat64(p.metrics.slotRetained.WithLabelValues("moenda-relay", big.Name)); got != 3<<20 {
		t.Fatalf("retained gauge = %v", got)
	}
	if got := testutil.ToFloat64(p.metrics.slotLag.WithLabelValues("moenda-relay", big.Name)); got != 2<<20 {
		t.Fatalf("lag gauge = %v", got)
	}

	big.RetainedBytes = 1 << 10 // its relay caught up
	p.checkSlots([]outbox.Slot{big}, warned)
	big.RetainedBytes = 5 << 20 // and fell behind again
	p.checkSlots([]outbox.Slot{big}, warned)
	small.WALStatus = "lost"
	p.checkSlots([]outbox.Slot{big, small}, warned)
	if n := count(); n != 3 || !strings.Contains(logs.String(), "wal_status=lost") {
		t.Fatalf("%d warnings, want 3 (past the size twice, and the invalidated slot):\n%s", n, logs)
	}
}
