package cluster

import (
	"net"
	"strconv"
	"testing"
)

// A stopped node's port must not be one the kernel hands to outgoing
// connections, or the node may not get it back.
func TestFreePortsLieBelowTheEphemeralRange(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	low, seen := ephemeralLow(), map[int]bool{}
	for _, p := range ports {
		if p < lowestPort || p >= low || seen[p] {
			t.Fatalf("port %d of %v: want distinct ports in [%d, %d)", p, ports, lowestPort, low)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
