package handlers

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Staged keeps a plugin's rows in the process, for the memory environment:
// writes are staged in the unit of work and applied when it commits, so a
// rolled-back unit leaves nothing. Every repository asked for in one unit
// (a handler's InTx joining its delivery's) shares that unit's staging.
// The memory transactor runs one unit at a time, so a unit other than the
// open one means the open one has ended, committed or rolled back.
type Staged[K comparable, V any] struct {
	mu        sync.Mutex
	committed map[K]V
	open      Tx
	unit      *Unit[K, V]
	seq       atomic.Int64
}

// NewStaged returns an empty store.
func NewStaged[K comparable, V any]() *Staged[K, V] {
	return &Staged[K, V]{committed: map[K]V{}}
}

// Unit returns the staging of tx, made on its first use.
func (s *Staged[K, V]) Unit(tx Tx) *Unit[K, V] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == tx {
		return s.unit
	}
	u := &Unit[K, V]{s: s, staged: map[K]V{}, deleted: map[K]bool{}}
	s.open, s.unit = tx, u
	tx.OnCommit(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		maps.DeleteFunc(s.committed, func(k K, _ V) bool { return u.deleted[k] })
		maps.Copy(s.committed, u.staged)
		if s.unit == u {
			s.open, s.unit = nil, nil
		}
	})
	return u
}

// Unit is one unit of work's writes to a Staged store.
type Unit[K comparable, V any] struct {
	s       *Staged[K, V]
	staged  map[K]V
	deleted map[K]bool // committed keys the unit deleted
}

// Get reads k from the unit's writes, then from what is committed.
func (u *Unit[K, V]) Get(k K) (V, bool) {
	if v, ok := u.staged[k]; ok {
		return v, true
	}
	if u.deleted[k] {
		var zero V
		return zero, false
	}
	u.s.mu.Lock()
	defer u.s.mu.Unlock()
	v, ok := u.s.committed[k]
	return v, ok
}

// Put stages v under k.
func (u *Unit[K, V]) Put(k K, v V) { u.staged[k] = v }

// Delete stages the removal of k.
func (u *Unit[K, V]) Delete(k K) {
	delete(u.staged, k)
	u.deleted[k] = true
}

// Sequence returns the store's next id, as a PostgreSQL sequence does: a
// rolled-back unit leaves nothing but a used id.
func (u *Unit[K, V]) Sequence() int64 { return u.s.seq.Add(1) }

// All is every row the unit sees: what is committed, with its own writes
// over it.
func (u *Unit[K, V]) All() map[K]V {
	u.s.mu.Lock()
	all := maps.Clone(u.s.committed)
	u.s.mu.Unlock()
	maps.DeleteFunc(all, func(k K, _ V) bool { return u.deleted[k] })
	maps.Copy(all, u.staged)
	return all
}

// Memory is the memory repository of each unit of work over one Staged
// store, made here and kept for the life of what it returns: view makes
// the repository of one unit's staging.
func Memory[K comparable, V, R any](view func(*Unit[K, V]) R) func(Tx) R {
	s := NewStaged[K, V]()
	return func(tx Tx) R { return view(s.Unit(tx)) }
}
