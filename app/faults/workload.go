package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/moenda/moenda/adapters/poll"
)

// Workload drives the real HTTP API: each writer publishes the probe's
// events through POST /v1/events, one at a time, and records every
// operation in the history before and after it.
type Workload struct {
	// Base is the API's URL, such as http://127.0.0.1:8080.
	Base string
	// RunID names the run: event ids derive from it.
	RunID   string
	Writers int
	// Interval is the pause between a writer's operations.
	Interval time.Duration
	// PoisonEvery makes every n-th event of a writer poison; 0 none.
	PoisonEvery int
	// EventName and Payload make the request's event from (writer, seq,
	// poison).
	EventName string
	Payload   func(writer, seq int, poison bool) any
	// Attempts is how often a writer sends a command whose answer was
	// cut before it records it as indeterminate; a retry reuses the
	// event id, so the API answers it once.
	Attempts int
	History  *History
	Client   *http.Client
}

// Run runs the writers until ctx ends, and returns how many operations
// each outcome had.
func (w Workload) Run(ctx context.Context) (map[Outcome]int, error) {
	var mu sync.Mutex
	counts := map[Outcome]int{}
	errs := make(chan error, w.Writers)
	var wg sync.WaitGroup
	for writer := range w.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				outcome, err := w.one(ctx, writer, seq)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				counts[outcome]++
				mu.Unlock()
				if !poll.Sleep(ctx, w.Interval) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return counts, <-errs
}

// one sends a writer's seq-th command and records it.
func (w Workload) one(ctx context.Context, writer, seq int) (Outcome, error) {
	poison := w.PoisonEvery > 0 && seq%w.PoisonEvery == w.PoisonEvery-1
	op := Op{Outcome: Invoked, Writer: writer, Seq: seq, EventID: EventID(w.RunID, writer, seq), Kind: Good, At: time.Now()}
	if poison {
		op.Kind = Poison
	}
	body, err := json.Marshal(map[string]any{"event_id": op.EventID, "event_name": w.EventName, "source": "faults",
		"payload": w.Payload(writer, seq, poison)})
	if err != nil {
		return "", err
	}
	if err := w.History.Add(Line{Op: op}); err != nil {
		return "", err
	}
	// The command is not abandoned when the run ends: its outcome is
	// recorded either way.
	sendCtx := context.WithoutCancel(ctx)
	op.Outcome = Indeterminate
	for attempt := 0; attempt < max(w.Attempts, 1) && op.Outcome == Indeterminate; attempt++ {
		op.Outcome = w.send(sendCtx, body)
		if op.Outcome == Indeterminate && !poll.Sleep(sendCtx, time.Duration(attempt+1)*200*time.Millisecond) {
			break
		}
	}
	op.At = time.Now()
	return op.Outcome, w.History.Add(Line{Op: op})
}

// send posts body once: 2xx is acknowledged, 4xx a definite failure, and
// anything else (a 5xx, a cut connection, a timeout) indeterminate.
func (w Workload) send(ctx context.Context, body []byte) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Base+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return Failed
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.Client.Do(req)
	if err != nil {
		return Indeterminate
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return OK
	case resp.StatusCode < 500:
		return Failed
	}
	return Indeterminate
}
