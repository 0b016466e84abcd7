package outbox

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// A logical relay's record of how far it published follows the items it
// is handed: a commit moves the WAL position and starts the count of the
// open transaction's rows again; rows of a transaction not yet ended add to
// its count, across items.
func TestStreamPositionFollowsTheItems(t *testing.T) {
	rows := func(txIDs ...uint64) []outboxRow {
		out := make([]outboxRow, len(txIDs))
		for i, id := range txIDs {
			out[i].txID, out[i].offset = id, int64(i)
		}
		return out
	}
	var p streamPosition
	steps := []struct {
		name string
		it   streamItem
		want streamPosition
	}{
		{"a whole transaction", streamItem{rows: rows(7, 7), end: 100}, streamPosition{lsn: 100}},
		{"one ended, the next begun", streamItem{rows: rows(8, 9, 9), end: 200, open: 2}, streamPosition{lsn: 200, txID: 9, rows: 2}},
		{"more of the open one", streamItem{rows: rows(9, 9, 9), open: 3}, streamPosition{lsn: 200, txID: 9, rows: 5}},
		{"it ends", streamItem{rows: rows(9), end: 300}, streamPosition{lsn: 300}},
		{"a keepalive before a later position", streamItem{end: 250}, streamPosition{lsn: 300}},
	}
	for _, s := range steps {
		if p = p.after(s.it); p != s.want {
			t.Fatalf("%s: %+v, want %+v", s.name, p, s.want)
		}
	}
}

// A relay that takes over drops the rows of the open transaction its
// predecessor published, and only those.
func TestStreamPositionSkipsWhatWasPublished(t *testing.T) {
	row := func(txID uint64) outboxRow { return outboxRow{position: position{txID: txID}} }
	cases := []struct {
		name     string
		from     streamPosition
		rows     []outboxRow
		left     int
		stillOwe int64
	}{
		{"part of an item", streamPosition{lsn: pglogrepl.LSN(1), txID: 9, rows: 2}, []outboxRow{row(9), row(9), row(9)}, 1, 0},
		{"a whole item, more to come", streamPosition{txID: 9, rows: 5}, []outboxRow{row(9), row(9)}, 0, 3},
		{"another transaction first: nothing dropped", streamPosition{txID: 9, rows: 2}, []outboxRow{row(8), row(9)}, 2, 0},
		{"the transaction ends early", streamPosition{txID: 9, rows: 5}, []outboxRow{row(9), row(10)}, 1, 0},
	}
	for _, c := range cases {
		left, p := c.from.skip(c.rows)
		if len(left) != c.left || p.rows != c.stillOwe {
			t.Errorf("%s: %d rows left, %d still to drop; want %d and %d", c.name, len(left), p.rows, c.left, c.stillOwe)
		}
	}
}

// A relay that takes over inside a long transaction, and a third that
// takes over from it before the transaction commits, each publish only the
// rows the one before had not: the stream hands the open transaction again
// from its first row every time, so each records the rows of it that are
// out, not those plus the ones its predecessor counted.
func TestStreamPositionAcrossTwoTakeovers(t *testing.T) {
	const tx = 9
	stream := func(n int) streamItem { // the open transaction's first n rows
		it := streamItem{open: n}
		for i := range n {
			it.rows = append(it.rows, outboxRow{position: position{txID: tx, offset: int64(i)}})
		}
		return it
	}
	published := map[int64]int{}
	// takeOver runs a relay from the record rec over the stream's first
	// n rows of the transaction, and returns what it records.
	takeOver := func(rec streamPosition, n int) streamPosition {
		at, skip := resume(rec)
		it := stream(n)
		rows, _ := skip.skip(it.rows)
		for _, rw := range rows {
			published[rw.offset]++
		}
		return at.after(it)
	}
	rec := streamPosition{lsn: 100}
	for _, n := range []int{5, 7, 10} { // the first relay, then two that take over
		rec = takeOver(rec, n)
		if rec.rows != int64(n) || rec.txID != tx || rec.lsn != 100 {
			t.Fatalf("after %d rows of the transaction: recorded %+v, want %d rows of %d at 100", n, rec, n, tx)
		}
	}
	for i := range int64(10) {
		if published[i] != 1 {
			t.Fatalf("row %d published %d times, want once: %v", i, published[i], published)
		}
	}
}
