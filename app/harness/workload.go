package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/moenda/moenda/adapters/await"
)

// Workload drives the real HTTP API: each writer publishes the probe's
// events through POST /v1/events, one at a time, and records every
// operation in the history before and after it.
type Workload struct {
	// Bases are the API's URLs, such as http://127.0.0.1:8080: a writer
	// sends each attempt of a command to the next one, so a node that
	// went away costs it one attempt.
	Bases []string
	// RunID names the run: event ids derive from it.
	RunID   string
	Writers int
	// Interval is the pause between a writer's operations.
	Interval time.Duration
	// PoisonEvery makes every n-th event of a writer poison, and
	// TransientEvery every n-th of the others transient; 0 none.
	PoisonEvery    int
	TransientEvery int
	// EventName and Payload make the request's event.
	EventName string
	Payload   func(writer, seq int, kind Kind) any
	// Attempts is how often a writer sends a command whose answer was
	// cut before it records it as indeterminate; a retry reuses the
	// event id, so the API answers it once.
	Attempts int
	History  *History
	Client   *http.Client
	// OnStatus, when set, hears each answer's status code (0 when the
	// request got none).
	OnStatus func(code int)
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
				if !await.Sleep(ctx, w.Interval) {
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
	id := EventID(w.RunID, writer, seq)
	op := Op{Outcome: Invoked, Writer: writer, Seq: seq, EventID: id, Kind: w.kind(seq), Correlation: CorrelationID(id), At: time.Now()}
	body, err := json.Marshal(map[string]any{"event_id": op.EventID, "event_name": w.EventName, "source": "faults",
		"payload": w.Payload(writer, seq, op.Kind)})
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
		op.Outcome = w.send(sendCtx, w.Bases[(writer+attempt)%len(w.Bases)], op.Correlation, body)
		if op.Outcome == Indeterminate && !await.Sleep(sendCtx, time.Duration(attempt+1)*200*time.Millisecond) {
			break
		}
	}
	op.At = time.Now()
	return op.Outcome, w.History.Add(Line{Op: op})
}

// kind is what the seq-th event of a writer is.
func (w Workload) kind(seq int) Kind {
	switch {
	case w.PoisonEvery > 0 && seq%w.PoisonEvery == w.PoisonEvery-1:
		return Poison
	case w.TransientEvery > 0 && seq%w.TransientEvery == w.TransientEvery/2:
		return Transient
	}
	return Good
}

// send posts body once: 2xx is acknowledged, 4xx a definite failure, and
// anything else (a 5xx, a cut connection, a timeout) indeterminate.
func (w Workload) send(ctx context.Context, base, correlation string, body []byte) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return Failed
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Correlation-ID", correlation)
	resp, err := w.Client.Do(req)
	if err != nil {
		if w.OnStatus != nil {
			w.OnStatus(0)
		}
		return Indeterminate
	}
	_ = resp.Body.Close()
	if w.OnStatus != nil {
		w.OnStatus(resp.StatusCode)
	}
	switch {
	case resp.StatusCode < 300:
		return OK
	case resp.StatusCode < 500:
		return Failed
	}
	return Indeterminate
}
