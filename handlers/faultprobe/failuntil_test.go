package faultprobe

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/moenda/moenda/handlers/event"
)

// An event asked to fail until a time fails every delivery before it, in
// a process that never saw it as in one that did: the outage is the
// dependency's, not the process's.
func TestFailUntilFailsEveryDeliveryBeforeIt(t *testing.T) {
	pl, _ := json.Marshal(Payload{Writer: 1, Seq: 2, FailUntil: time.Now().Add(time.Hour)})
	e := event.Event{ID: "e1", Name: Event, Payload: pl}
	for _, p := range []*probe{{failed: map[string]int{}}, {failed: map[string]int{}}} {
		for range 3 {
			if err := p.apply(context.Background(), e); !errors.Is(err, ErrTransient) {
				t.Fatalf("apply before fail_until = %v, want ErrTransient", err)
			}
		}
	}
	var back Payload
	if err := json.Unmarshal(pl, &back); err != nil || back.FailUntil.IsZero() {
		t.Fatalf("fail_until lost on the way: %+v %v", back, err)
	}
	if b, _ := json.Marshal(Payload{Writer: 1}); string(b) != `{"writer":1,"seq":0}` {
		t.Errorf("a payload without fail_until = %s, want no fail_until", b)
	}
}
