package redrive

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

var _ Store = (*Memory)(nil)

// Memory is the store of the memory environment: the PostgreSQL one's
// answers, for the life of the process.
type Memory struct {
	now      func() time.Time
	mu       sync.Mutex
	redrives []Redrive // by id, the first being 1
	items    map[int64][]Item
}

// NewMemory returns an empty store whose times are now's.
func NewMemory(now func() time.Time) *Memory {
	return &Memory{now: now, items: map[int64][]Item{}}
}

// Create implements Store.
func (m *Memory) Create(_ context.Context, r Redrive, items []Item) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.ID, r.CreatedAt = int64(len(m.redrives)+1), m.now().UTC()
	r.Selection = maps.Clone(r.Selection)
	m.redrives = append(m.redrives, r)
	m.items[r.ID] = slices.Clone(items)
	return r.ID, nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id int64) (Redrive, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get(id)
}

func (m *Memory) get(id int64) (Redrive, error) {
	if id < 1 || id > int64(len(m.redrives)) {
		return Redrive{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	r := m.redrives[id-1]
	r.Counters = Counters{}
	for _, it := range m.items[id] {
		r.Counters.count(it.State)
	}
	return r, nil
}

// List implements Store.
func (m *Memory) List(context.Context) ([]Redrive, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Redrive{}
	for id := int64(len(m.redrives)); id >= 1; id-- {
		r, _ := m.get(id)
		out = append(out, r)
	}
	return out, nil
}

// Move implements Store.
func (m *Memory) Move(_ context.Context, id int64, from []State, to State, reason string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.get(id); err != nil {
		return false, err
	}
	r := &m.redrives[id-1]
	if !slices.Contains(from, r.State) {
		return false, nil
	}
	r.State, r.Reason = to, reason
	return true, nil
}

// Items implements Store.
func (m *Memory) Items(_ context.Context, id int64, s ItemState, from, n int) ([]Item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Item{}
	for _, it := range m.items[id] {
		if it.State == s && it.Seq >= from && len(out) < n {
			out = append(out, it)
		}
	}
	return out, nil
}

// Mark implements Store.
func (m *Memory) Mark(_ context.Context, id int64, seqs []int, s ItemState, reason string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	items := m.items[id]
	for i := range items {
		if slices.Contains(seqs, items[i].Seq) {
			items[i].State, items[i].Reason = s, reason
			if s == Sent {
				items[i].SentAt = at.UTC()
			}
		}
	}
	return nil
}

// OfEvent implements Store.
func (m *Memory) OfEvent(_ context.Context, eventID string) ([]EventItem, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []EventItem{}
	for id := int64(1); id <= int64(len(m.redrives)); id++ {
		for _, it := range m.items[id] {
			if it.EventID == eventID {
				out = append(out, EventItem{RedriveID: id, Item: it})
			}
		}
	}
	return out, nil
}

// Running implements Store.
func (m *Memory) Running(context.Context) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []int64
	for _, r := range m.redrives {
		if r.State == Canary || r.State == Running {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}
