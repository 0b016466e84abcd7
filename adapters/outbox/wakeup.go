package outbox

import "sync"

// wakeup is whom a commit that wrote events wakes: the relays of this
// process at once, and, unless they all lead their groups, a polling
// relay in another process through the notifier.
type wakeup struct {
	mu       sync.Mutex
	relays   []*Relay
	notifier *Notifier
}

// Wakes makes each commit through o that wrote events wake r, a relay of
// this process.
func (o *Outbox) Wakes(r *Relay) {
	o.wake.mu.Lock()
	defer o.wake.mu.Unlock()
	o.wake.relays = append(o.wake.relays, r)
}

// NotifiesThrough makes each commit through o that wrote events signal n,
// which reaches the polling relays of other processes, unless this
// process's own relays all lead.
func (o *Outbox) NotifiesThrough(n *Notifier) {
	o.wake.mu.Lock()
	defer o.wake.mu.Unlock()
	o.wake.notifier = n
}

// Committed tells the relays that a transaction wrote events through o
// and committed. The transactor calls it after each such commit.
func (o *Outbox) Committed() {
	o.wake.mu.Lock()
	defer o.wake.mu.Unlock()
	leading := len(o.wake.relays) > 0
	for _, r := range o.wake.relays {
		r.Wake()
		leading = leading && r.Active()
	}
	if o.wake.notifier != nil && !leading {
		o.wake.notifier.Signal()
	}
}
