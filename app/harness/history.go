package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/google/uuid"
)

// EventID is the event id of a writer's seq-th operation in a run: the
// same on every retry of that command, so a repeated request is the same
// event to the inbox and to the checker.
func EventID(run string, writer, seq int) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("moenda-faults:"+run+":"+strconv.Itoa(writer)+":"+strconv.Itoa(seq))).String()
}

// CorrelationID is the correlation id the workload sends with an event's
// request; its dead letter must carry it.
func CorrelationID(eventID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("moenda-faults-correlation:"+eventID)).String()
}

// Line is one line of the history file: an operation of a writer, or a
// fault of the nemesis (Fault set, Op zero).
type Line struct {
	Op
	// Fault names a nemesis action, and Phase is "start" or "stop".
	Fault string `json:"fault,omitempty"`
	Phase string `json:"phase,omitempty"`
}

// History appends the run's operations and faults to a JSONL file outside
// the database under test, as they happen: it survives whatever the
// system under test loses.
type History struct {
	mu     sync.Mutex
	counts map[Outcome]int
	f      *os.File
	buf    *bufio.Writer
	enc    *json.Encoder
}

// CreateHistory creates the history file at path.
func CreateHistory(path string) (*History, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("harness: history: %w", err)
	}
	buf := bufio.NewWriter(f)
	return &History{f: f, buf: buf, enc: json.NewEncoder(buf)}, nil
}

// Add appends a line.
func (h *History) Add(l Line) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.enc.Encode(l); err != nil {
		return fmt.Errorf("harness: history: %w", err)
	}
	if l.Fault == "" {
		if h.counts == nil {
			h.counts = map[Outcome]int{}
		}
		h.counts[l.Outcome]++
	}
	return nil
}

// count is how many operations with outcome were added so far.
func (h *History) count(o Outcome) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[o]
}

// Close flushes and closes the file.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.buf.Flush(); err != nil {
		_ = h.f.Close()
		return fmt.Errorf("harness: history: %w", err)
	}
	return h.f.Close()
}

// ReadHistory reads a history back: the operations, for Check, and the
// nemesis's lines, for the recovery times.
func ReadHistory(r io.Reader) (ops []Op, faults []Line, err error) {
	dec := json.NewDecoder(r)
	for {
		var l Line
		switch err := dec.Decode(&l); {
		case err == io.EOF:
			return ops, faults, nil
		case err != nil:
			return nil, nil, fmt.Errorf("harness: history line %d: %w", len(ops)+len(faults)+1, err)
		}
		if l.Fault != "" {
			faults = append(faults, l)
			continue
		}
		ops = append(ops, l.Op)
	}
}

// WriteEffects writes the probe's effects, one JSON line each, beside a
// failing case's history: with both, its verdict can be worked out again
// once the case's database is gone.
func WriteEffects(path string, effects []Effect) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("harness: effects: %w", err)
	}
	buf := bufio.NewWriter(f)
	enc := json.NewEncoder(buf)
	for _, e := range effects {
		if err := enc.Encode(e); err != nil {
			_ = f.Close()
			return fmt.Errorf("harness: effects: %w", err)
		}
	}
	if err := buf.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("harness: effects: %w", err)
	}
	return f.Close()
}
