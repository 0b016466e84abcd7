package outbox_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/moenda/moenda/adapters/outbox"
)

// Slot names are valid PostgreSQL names and tell apart every group and
// database whose names fold alike, however long.
func TestSlotNamesAreOnePerGroupAndDatabase(t *testing.T) {
	long := strings.Repeat("x", 80)
	pairs := [][2]string{
		{"app", "orders-relay"}, {"app", "orders_relay"}, {"app", "orders.relay"}, {"app", "Orders-Relay"},
		{"App", "orders-relay"}, {"app-", "orders"}, {"app", "-orders"},
		{long, "a"}, {long, "b"}, {"db", long + "1"}, {"db", long + "2"},
	}
	valid := regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := outbox.SlotName(p[0], p[1])
		if !valid.MatchString(name) {
			t.Errorf("slot name %q of %v is not a valid replication slot name", name, p)
		}
		if prev, ok := seen[name]; ok {
			t.Errorf("%v and %v share slot name %q", prev, p, name)
		}
		seen[name] = p
	}
	if got := outbox.SlotName("app", "orders-relay"); !strings.HasPrefix(got, "moenda_app__orders_relay_") {
		t.Errorf("slot name %q does not start with the names it stands for", got)
	}
}
