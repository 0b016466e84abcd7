package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// lowestPort is the lowest port FreePorts hands out: above the ports
// services on this machine are configured with.
const lowestPort = 10000

// FreePorts returns n distinct loopback ports nothing listens on, chosen
// below the kernel's ephemeral range. A node that stops and starts again
// must find its port still free. In the ephemeral range it may not: any
// outgoing connection can take the port as its own while the node is down,
// and a client dialling the stopped node can even connect to itself there;
// the node then fails to start with eaddrinuse.
func FreePorts(n int) ([]int, error) {
	highest := ephemeralLow() - 1
	if highest <= lowestPort {
		return nil, fmt.Errorf("cluster: the ephemeral range starts at %d, leaving no ports above %d", highest+1, lowestPort)
	}
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, errors.New("cluster: no free loopback port in 1000 tries")
		}
		p := lowestPort + rand.IntN(highest-lowestPort+1)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralLow is the first port of Linux's ephemeral range, or its
// default where the range cannot be read.
func ephemeralLow() int {
	low := 32768
	if text, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(text), &low) // left as it was on a failure
	}
	return low
}
