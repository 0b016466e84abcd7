package failures_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/testenv"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// onEveryLedger runs test on the PostgreSQL ledger and the memory one,
// each new.
func onEveryLedger(t *testing.T, test func(t *testing.T, l failures.Ledger)) {
	t.Run("postgres", func(t *testing.T) { test(t, failures.NewPostgres(testenv.Postgres(t).Pool)) })
	t.Run("memory", func(t *testing.T) { test(t, failures.NewMemory(func() time.Time { return t0 })) })
}

// failure is a dead letter of queue q's handler, the i-th of its kind.
func failure(q string, i int, errText string) failures.Failure {
	at := t0.Add(time.Duration(i) * time.Second)
	f := failures.Failure{
		Queue: q + ".dlq", EventID: fmt.Sprintf("ev-%s-%d", q, i), FailedQueue: q, Handler: "h-" + q,
		EventName: "demo.a.v1", CorrelationID: fmt.Sprintf("corr-%d", i%3), Reason: "retries_exhausted", Error: errText,
		Attempts: 3, Occurrences: 1, FirstFailureAt: at, LastFailureAt: at, Status: failures.Unresolved,
		Headers: map[string]string{"moenda-queue": q}, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)),
	}
	f.Fingerprint = failures.Fingerprint(f.Handler, f.Reason, f.Error)
	return f
}

func record(t *testing.T, l failures.Ledger, fs ...failures.Failure) int {
	t.Helper()
	n, err := l.Record(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func list(t *testing.T, l failures.Ledger, f failures.Filter, page failures.Page) []failures.Failure {
	t.Helper()
	out, err := l.List(context.Background(), f, page)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A dead letter read twice (a crash between commit and acknowledgement,
// or two copies in one batch) is one failure.
func TestRecordKeepsOneFailurePerQueueAndEvent(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		a, b := failure("q", 1, "boom"), failure("q", 2, "boom")
		if n := record(t, l, a, b, a); n != 2 {
			t.Fatalf("Record of a, b, a = %d, want 2", n)
		}
		if n := record(t, l, a, b); n != 0 {
			t.Fatalf("Record again = %d, want 0", n)
		}
		other := a
		other.Queue = "other.dlq" // the same event dead-lettered by another queue is another failure
		if n := record(t, l, other); n != 1 {
			t.Fatalf("Record of the event from another queue = %d, want 1", n)
		}
		got := list(t, l, failures.Filter{}, failures.Page{})
		if len(got) != 3 {
			t.Fatalf("List = %d failures, want 3", len(got))
		}
		one, err := l.Get(context.Background(), got[2].ID)
		if err != nil {
			t.Fatal(err)
		}
		one.ID, one.RecordedAt = 0, time.Time{}
		if !reflect.DeepEqual(one, a) {
			t.Errorf("Get =\n%+v\nwant what was recorded:\n%+v", one, a)
		}
		if _, err := l.Get(context.Background(), 1e9); !errors.Is(err, failures.ErrNotFound) {
			t.Errorf("Get of an id never given = %v, want ErrNotFound", err)
		}
	})
}

// A failure being re-driven that dead-letters again is the same row,
// unresolved again with one more occurrence; the same dead letter read
// twice is still counted once.
func TestAFailureThatFailsAgainIsOneRow(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		a := failure("q", 1, "boom")
		record(t, l, a)
		id := list(t, l, failures.Filter{}, failures.Page{})[0].ID
		again := a
		again.LastFailureAt, again.Error = a.LastFailureAt.Add(time.Minute), "boom again"
		if n := record(t, l, again); n != 0 {
			t.Fatalf("a later failure of an unresolved one = %d rows changed, want 0: it is not being re-driven", n)
		}
		if n, err := l.Mark(ctx, []int64{id, id}, failures.Unresolved, failures.Redriving); err != nil || n != 1 {
			t.Fatalf("Mark = %d, %v; want 1", n, err)
		}
		if n := record(t, l, again, again); n != 1 {
			t.Fatalf("Record of the failure again = %d, want 1", n)
		}
		record(t, l, again) // read twice
		got, err := l.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != failures.Unresolved || got.Occurrences != 2 || got.Error != "boom again" || !got.LastFailureAt.Equal(again.LastFailureAt) || !got.FirstFailureAt.Equal(a.FirstFailureAt) {
			t.Errorf("after failing again: %s, %d occurrences, %q, last %s first %s; want unresolved, 2, the new error and time, the first time kept",
				got.Status, got.Occurrences, got.Error, got.LastFailureAt, got.FirstFailureAt)
		}
	})
}

// Pages follow the id, newest first, and never overlap; every filter
// selects what it says, on both ledgers alike.
func TestListPagesAndFilters(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		var fs []failures.Failure
		for i := range 25 {
			q := []string{"alpha", "beta"}[i%2]
			fs = append(fs, failure(q, i, fmt.Sprintf("insert %d: Timeout after 30s", i)))
		}
		fs[7].Reason, fs[7].Error, fs[7].EventName = "decode_error", "body is not JSON", "demo.b.v1"
		record(t, l, fs...)

		var seen []int64
		for after := int64(0); ; {
			page := list(t, l, failures.Filter{}, failures.Page{After: after, Limit: 10})
			if len(page) == 0 {
				break
			}
			for _, f := range page {
				seen = append(seen, f.ID)
			}
			after = page[len(page)-1].ID
		}
		if len(seen) != 25 || !slices.IsSortedFunc(seen, func(a, b int64) int { return int(b - a) }) || len(slices.Compact(slices.Clone(seen))) != 25 {
			t.Fatalf("paging saw %v: want 25 ids, newest first, each once", seen)
		}

		all := list(t, l, failures.Filter{}, failures.Page{})
		ids := func(f failures.Filter) []string {
			var out []string
			for _, x := range list(t, l, f, failures.Page{}) {
				out = append(out, x.EventID)
			}
			return out
		}
		want := func(keep func(failures.Failure) bool) []string {
			var out []string
			for _, x := range all {
				if keep(x) {
					out = append(out, x.EventID)
				}
			}
			return out
		}
		if _, err := l.Mark(ctx, []int64{all[0].ID}, failures.Unresolved, failures.Archived); err != nil {
			t.Fatal(err)
		}
		archived := all[0].EventID
		for _, c := range []struct {
			name string
			f    failures.Filter
			keep func(failures.Failure) bool
		}{
			{"default hides the archived", failures.Filter{}, func(x failures.Failure) bool { return x.EventID != archived }},
			{"archived", failures.Filter{Status: failures.Archived}, func(x failures.Failure) bool { return x.EventID == archived }},
			{"queue", failures.Filter{FailedQueue: "beta"}, func(x failures.Failure) bool { return x.FailedQueue == "beta" }},
			{"handler", failures.Filter{Handler: "h-alpha"}, func(x failures.Failure) bool { return x.Handler == "h-alpha" && x.EventID != archived }},
			{"reason", failures.Filter{Reason: "decode_error"}, func(x failures.Failure) bool { return x.Reason == "decode_error" }},
			{"type", failures.Filter{EventName: "demo.b.v1"}, func(x failures.Failure) bool { return x.EventName == "demo.b.v1" }},
			{"ids", failures.Filter{IDs: []int64{all[3].ID, all[5].ID}}, func(x failures.Failure) bool { return x.ID == all[3].ID || x.ID == all[5].ID }},
			{"event id", failures.Filter{EventID: "ev-beta-3"}, func(x failures.Failure) bool { return x.EventID == "ev-beta-3" }},
			{"correlation id", failures.Filter{CorrelationID: "corr-1"}, func(x failures.Failure) bool { return x.CorrelationID == "corr-1" && x.EventID != archived }},
			{"fingerprint", failures.Filter{Fingerprint: fs[7].Fingerprint}, func(x failures.Failure) bool { return x.Fingerprint == fs[7].Fingerprint }},
			{"time range", failures.Filter{Since: t0.Add(5 * time.Second), Until: t0.Add(9 * time.Second)}, func(x failures.Failure) bool {
				return !x.LastFailureAt.Before(t0.Add(5*time.Second)) && x.LastFailureAt.Before(t0.Add(9*time.Second))
			}},
			{"text, any case", failures.Filter{Text: "NOT json"}, func(x failures.Failure) bool { return x.EventID == fs[7].EventID }},
			{"text with a LIKE wildcard is plain text", failures.Filter{Text: "%"}, func(failures.Failure) bool { return false }},
		} {
			if got, w := ids(c.f), want(c.keep); !slices.Equal(got, w) || len(w) == 0 && c.f.Text != "%" {
				t.Errorf("%s: %v, want %v", c.name, got, w)
			}
		}
	})
}

// The acceptance case of groups: 1,000 failures of three causes, their
// texts holding ids and values that vary, form three groups.
func TestThreeCausesFormThreeGroups(t *testing.T) {
	causes := []func(i int) (queue, text string){
		func(i int) (string, string) {
			return "estoque.pedidos", fmt.Sprintf(`reserve pedido %d: produto "SKU-%04d" out of stock`, i, i*7)
		},
		func(i int) (string, string) {
			return "notificacoes.tarefas-concluidas", fmt.Sprintf("webhook: Post \"https://hooks.example.com/T%d\": dial tcp 10.0.%d.%d:443: i/o timeout after %dms", i, i%200, i%250, 1000+i)
		},
		func(i int) (string, string) {
			return "car.processos", fmt.Sprintf("processo %s: documento %016x not found for user %s", uuidOf(i), uint64(i+1)*0x9e3779b97f4a7c15, fmt.Sprintf("u%d@example.com", i))
		},
	}
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		var fs []failures.Failure
		for i := range 1000 {
			q, text := causes[i%3](i)
			fs = append(fs, failure(q, i, text))
		}
		record(t, l, fs...)
		groups, err := l.Groups(context.Background(), failures.Filter{}, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 3 {
			for _, g := range groups {
				t.Logf("%s %d %q", g.Fingerprint, g.Count, g.Error)
			}
			t.Fatalf("%d groups, want 3", len(groups))
		}
		if groups[0].Count != 334 || groups[1].Count != 333 || groups[2].Count != 333 {
			t.Errorf("counts %d %d %d, want 334 333 333, the largest first", groups[0].Count, groups[1].Count, groups[2].Count)
		}
		g := groups[0]
		if g.Queues[0] != "estoque.pedidos" || len(g.Queues) != 1 || !slices.Equal(g.EventNames, []string{"demo.a.v1"}) ||
			!g.FirstFailureAt.Equal(t0) || !g.LastFailureAt.Equal(t0.Add(999*time.Second)) ||
			g.Error != `reserve pedido <n>: produto "…" out of stock` {
			t.Errorf("group %+v", g)
		}
	})
}

func uuidOf(i int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i*2654435761%(1<<32), i%65536, i%4096, (i*7)%4096, i*1_000_003)
}

// The metrics count what waits for an operator; retention deletes only
// what is settled, and only once it is old.
func TestUnresolvedCountsAndPrune(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		var fs []failures.Failure
		for i := range 6 {
			fs = append(fs, failure([]string{"alpha", "beta"}[i%2], i, "boom"))
		}
		fs[5].Reason = "decode_error"
		record(t, l, fs...)
		all := list(t, l, failures.Filter{}, failures.Page{}) // newest first: all[0] is fs[5]
		byEvent := map[string]int64{}
		for _, f := range all {
			byEvent[f.EventID] = f.ID
		}
		mark := func(i int, to failures.Status) {
			if n, err := l.Mark(ctx, []int64{byEvent[fs[i].EventID]}, failures.Unresolved, to); err != nil || n != 1 {
				t.Fatalf("Mark %d %s = %d, %v", i, to, n, err)
			}
		}
		mark(0, failures.Resolved)
		mark(1, failures.Archived)
		mark(2, failures.Redriving)
		counts, err := l.Unresolved(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []failures.Count{{"alpha", "retries_exhausted", 1}, {"beta", "decode_error", 1}, {"beta", "retries_exhausted", 1}}
		if !reflect.DeepEqual(counts, want) {
			t.Errorf("Unresolved = %v, want %v", counts, want)
		}
		// fs[i] failed at t0+i s: a cutoff of t0+1.5s finds fs[0] (resolved)
		// and fs[1] (archived), and not the unresolved or re-driving ones.
		if n, err := l.Prune(ctx, t0.Add(1500*time.Millisecond), 1); err != nil || n != 1 {
			t.Fatalf("Prune, a batch of 1 = %d, %v", n, err)
		}
		if n, err := l.Prune(ctx, t0.Add(time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("Prune of the rest = %d, %v; want 1: unresolved and re-driving failures are kept", n, err)
		}
		for i, kept := range []bool{false, false, true, true, true, true} {
			_, err := l.Get(ctx, byEvent[fs[i].EventID])
			if kept != (err == nil) {
				t.Errorf("failure %d: Get = %v, want kept %v", i, err, kept)
			}
		}
		if got := len(list(t, l, failures.Filter{Status: failures.Archived}, failures.Page{})) + len(list(t, l, failures.Filter{}, failures.Page{})); got != 4 {
			t.Errorf("the lists hold %d failures after pruning, want 4", got)
		}
	})
}

// A selection is frozen as ids; deleting takes them out whatever their
// status.
func TestSelectAndDelete(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		for i := range 4 {
			record(t, l, failure([]string{"alpha", "beta"}[i%2], i, "boom"))
		}
		ids, err := l.Select(ctx, failures.Filter{FailedQueue: "alpha"})
		if err != nil || len(ids) != 2 || ids[0] >= ids[1] {
			t.Fatalf("Select = %v, %v; want alpha's two ids in order", ids, err)
		}
		record(t, l, failure("alpha", 9, "boom")) // after the selection
		if n, err := l.Mark(ctx, ids[:1], failures.Unresolved, failures.Archived); err != nil || n != 1 {
			t.Fatalf("Mark = %d, %v", n, err)
		}
		if n, err := l.Delete(ctx, append(ids, 1e9)); err != nil || n != 2 {
			t.Fatalf("Delete = %d, %v; want 2, archived or not", n, err)
		}
		if n, err := l.Delete(ctx, ids); err != nil || n != 0 {
			t.Fatalf("Delete again = %d, %v; want 0", n, err)
		}
		left, err := l.Select(ctx, failures.Filter{})
		if err != nil || len(left) != 3 {
			t.Fatalf("left %v, %v; want beta's two and the late alpha", left, err)
		}
		if _, err := l.Get(ctx, ids[0]); !errors.Is(err, failures.ErrNotFound) {
			t.Errorf("Get of a deleted failure = %v", err)
		}
	})
}

// An edit is a failure of its own, linked both ways to its original,
// which stays as it was read but leaves the default views and can be
// neither edited nor re-driven again. A later dead letter of the event
// lands on the edit; retention takes the original only once its edit is
// gone.
func TestAnEditKeepsTheOriginalLinked(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		a := failure("q", 1, "boom")
		a.Headers["event_name"] = a.EventName
		record(t, l, a, failure("q", 2, "boom"))
		orig := list(t, l, failures.Filter{EventID: a.EventID}, failures.Page{})[0]
		edit, err := l.Edit(ctx, orig.ID, failures.Edition{Body: []byte(`{"n":"fixed"}`), EventName: "demo.a.v2"})
		if err != nil {
			t.Fatal(err)
		}
		if edit.ID == orig.ID || edit.EditOf != orig.ID || edit.Status != failures.Unresolved || string(edit.Body) != `{"n":"fixed"}` ||
			edit.EventName != "demo.a.v2" || edit.Headers["event_name"] != "demo.a.v2" || edit.EventID != a.EventID || edit.Queue != a.Queue ||
			edit.Error != a.Error || edit.Fingerprint != a.Fingerprint {
			t.Errorf("the edit = %+v", edit)
		}
		got, err := l.Get(ctx, edit.ID)
		if err != nil || !reflect.DeepEqual(got, edit) {
			t.Errorf("Get of the edit = %+v, %v; want what Edit returned:\n%+v", got, err, edit)
		}
		was, err := l.Get(ctx, orig.ID)
		if err != nil || was.Status != failures.Edited || was.EditedBy != edit.ID || string(was.Body) != string(a.Body) || was.EventName != a.EventName {
			t.Errorf("the original after its edit = %+v, %v", was, err)
		}
		if _, err := l.Edit(ctx, orig.ID, failures.Edition{Body: []byte(`{}`), EventName: "demo.a.v1"}); !errors.Is(err, failures.ErrNotUnresolved) {
			t.Errorf("a second edit of the original = %v, want ErrNotUnresolved", err)
		}
		if _, err := l.Edit(ctx, 1e9, failures.Edition{Body: []byte(`{}`)}); !errors.Is(err, failures.ErrNotFound) {
			t.Errorf("an edit of no failure = %v, want ErrNotFound", err)
		}
		if n, err := l.Redrive(ctx, []int64{orig.ID}, 7); err != nil || n != 0 {
			t.Errorf("re-driving the original = %d, %v; want 0", n, err)
		}
		ids := func(f failures.Filter) []int64 {
			var out []int64
			for _, x := range list(t, l, f, failures.Page{}) {
				out = append(out, x.ID)
			}
			return out
		}
		if got := ids(failures.Filter{EventID: a.EventID}); !slices.Equal(got, []int64{edit.ID}) {
			t.Errorf("the default view of the event = %v, want the edit alone", got)
		}
		if got := ids(failures.Filter{Status: failures.Edited}); !slices.Equal(got, []int64{orig.ID}) {
			t.Errorf("the edited failures = %v, want the original", got)
		}

		// The edit re-driven fails again: the same dead letter lands on it.
		if n, err := l.Redrive(ctx, []int64{edit.ID}, 7); err != nil || n != 1 {
			t.Fatalf("re-driving the edit = %d, %v", n, err)
		}
		again := a
		again.LastFailureAt, again.Error, again.Body = a.LastFailureAt.Add(time.Minute), "boom again", []byte(`{"n":"fixed"}`)
		if n := record(t, l, again); n != 1 {
			t.Fatalf("Record of the edit failing again = %d, want 1", n)
		}
		if got, _ := l.Get(ctx, edit.ID); got.Status != failures.Unresolved || got.Occurrences != 2 || got.Error != "boom again" {
			t.Errorf("the edit after failing again = %+v", got)
		}
		if got, _ := l.Get(ctx, orig.ID); got.Status != failures.Edited || got.Occurrences != 1 {
			t.Errorf("the original after its edit failed again = %+v", got)
		}

		// Retention: the original waits for its edit.
		if n, err := l.Mark(ctx, []int64{edit.ID}, failures.Unresolved, failures.Resolved); err != nil || n != 1 {
			t.Fatalf("Mark the edit resolved = %d, %v", n, err)
		}
		if n, err := l.Prune(ctx, t0.Add(time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("Prune = %d, %v; want 1, the edit: its original waits for it to be gone", n, err)
		}
		if n, err := l.Prune(ctx, t0.Add(time.Hour), 100); err != nil || n != 1 {
			t.Fatalf("Prune again = %d, %v; want 1, the original", n, err)
		}
		if _, err := l.Get(ctx, orig.ID); !errors.Is(err, failures.ErrNotFound) {
			t.Errorf("the original after both were pruned: %v", err)
		}
		if n := record(t, l, a); n != 1 {
			t.Errorf("a new dead letter of the event once both are gone = %d rows, want 1", n)
		}
	})
}

// A cause group carries its operator's comment, kept by fingerprint:
// set, replaced, cleared by empty text; a fingerprint no failure has
// takes none.
func TestACommentNotesACauseGroup(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		a, b := failure("alpha", 1, "boom"), failure("beta", 2, "bang")
		record(t, l, a, b)
		comment := func(fp string) *failures.Comment {
			t.Helper()
			gs, err := l.Groups(ctx, failures.Filter{}, failures.ByCause)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				if g.Key != g.Fingerprint {
					t.Errorf("a cause group's key %q is not its fingerprint %q", g.Key, g.Fingerprint)
				}
				if g.Fingerprint == fp {
					return g.Comment
				}
			}
			t.Fatalf("no group %s in %+v", fp, gs)
			return nil
		}
		if c := comment(a.Fingerprint); c != nil {
			t.Errorf("a group never noted has the comment %+v", c)
		}
		set, err := l.SetComment(ctx, a.Fingerprint, "stock service down; INC-231", "ana")
		if err != nil || set == nil || set.Text != "stock service down; INC-231" || set.By != "ana" || set.At.IsZero() {
			t.Fatalf("SetComment = %+v, %v", set, err)
		}
		if c := comment(a.Fingerprint); c == nil || *c != *set {
			t.Errorf("the group's comment = %+v, want %+v", c, set)
		}
		if c := comment(b.Fingerprint); c != nil {
			t.Errorf("the other group has the comment %+v", c)
		}
		if c, err := l.SetComment(ctx, a.Fingerprint, "back at 10:40", "rui"); err != nil || c.Text != "back at 10:40" || c.By != "rui" {
			t.Fatalf("SetComment again = %+v, %v", c, err)
		}
		if c := comment(a.Fingerprint); c == nil || c.Text != "back at 10:40" || c.By != "rui" {
			t.Errorf("the replaced comment = %+v", c)
		}
		gs, err := l.Groups(ctx, failures.Filter{}, failures.ByQueue)
		if err != nil || len(gs) != 2 || gs[0].Comment != nil || gs[1].Comment != nil {
			t.Errorf("groups by queue = %+v, %v; want two, without comments: a comment is a cause's", gs, err)
		}
		if c, err := l.SetComment(ctx, a.Fingerprint, "", "rui"); err != nil || c != nil {
			t.Fatalf("SetComment of empty text = %+v, %v; want nil: cleared", c, err)
		}
		if c := comment(a.Fingerprint); c != nil {
			t.Errorf("the cleared comment = %+v", c)
		}
		if _, err := l.SetComment(ctx, a.Fingerprint, "", "rui"); err != nil {
			t.Errorf("clearing no comment = %v, want nil", err)
		}
		for _, text := range []string{"note", ""} {
			if c, err := l.SetComment(ctx, "0000000000000000", text, "ana"); !errors.Is(err, failures.ErrNotFound) || c != nil {
				t.Errorf("SetComment %q on a fingerprint no failure has = %+v, %v; want ErrNotFound", text, c, err)
			}
		}
	})
}

// Groups by queue, event type and reason count what each key holds, with
// its first and last failure, queues and event types, the largest first;
// both ledgers alike.
func TestGroupsByEachKey(t *testing.T) {
	onEveryLedger(t, func(t *testing.T, l failures.Ledger) {
		ctx := context.Background()
		var fs []failures.Failure
		for i := range 6 {
			fs = append(fs, failure([]string{"alpha", "beta", "alpha"}[i%3], i, "boom"))
		}
		fs[1].EventName, fs[5].EventName = "demo.b.v1", "demo.b.v1"
		fs[2].Reason, fs[2].Fingerprint = "decode_error", failures.Fingerprint(fs[2].Handler, "decode_error", fs[2].Error)
		record(t, l, fs...)
		type row struct {
			key, reason    string
			count          int
			first, last    int
			queues, events []string
		}
		for _, c := range []struct {
			by   failures.GroupBy
			want []row
		}{
			{failures.ByQueue, []row{
				{"alpha", "", 4, 0, 5, []string{"alpha"}, []string{"demo.a.v1", "demo.b.v1"}},
				{"beta", "", 2, 1, 4, []string{"beta"}, []string{"demo.a.v1", "demo.b.v1"}},
			}},
			{failures.ByEventType, []row{
				{"demo.a.v1", "", 4, 0, 4, []string{"alpha", "beta"}, []string{"demo.a.v1"}},
				{"demo.b.v1", "", 2, 1, 5, []string{"alpha", "beta"}, []string{"demo.b.v1"}},
			}},
			{failures.ByReason, []row{
				{"retries_exhausted", "retries_exhausted", 5, 0, 5, []string{"alpha", "beta"}, []string{"demo.a.v1", "demo.b.v1"}},
				{"decode_error", "decode_error", 1, 2, 2, []string{"alpha"}, []string{"demo.a.v1"}},
			}},
		} {
			gs, err := l.Groups(ctx, failures.Filter{}, c.by)
			if err != nil {
				t.Fatalf("by %s: %v", c.by, err)
			}
			var got []row
			for _, g := range gs {
				got = append(got, row{g.Key, g.Reason, g.Count, int(g.FirstFailureAt.Sub(t0) / time.Second), int(g.LastFailureAt.Sub(t0) / time.Second), g.Queues, g.EventNames})
				if g.Fingerprint != "" || g.Handler != "" || g.Error != "" || g.Comment != nil {
					t.Errorf("by %s: group %+v has a cause's fields", c.by, g)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("by %s:\n%+v\nwant\n%+v", c.by, got, c.want)
			}
		}
		// The filter selects before grouping.
		gs, err := l.Groups(ctx, failures.Filter{FailedQueue: "beta"}, failures.ByReason)
		if err != nil || len(gs) != 1 || gs[0].Key != "retries_exhausted" || gs[0].Count != 2 {
			t.Errorf("beta's groups by reason = %+v, %v", gs, err)
		}
		if gs, err := l.Groups(ctx, failures.Filter{}, failures.ByCause); err != nil || len(gs) != 3 || gs[0].Count != 3 || gs[1].Count != 2 || gs[2].Count != 1 {
			t.Errorf("groups by cause = %+v, %v; want 3, of 3, 2 and 1 (a handler each, and a reason apart)", gs, err)
		}
		if _, err := l.Groups(ctx, failures.Filter{}, "handler"); err == nil || err.Error() != `by must be cause, queue, event_type or reason, got "handler"` {
			t.Errorf("groups by handler = %v", err)
		}
	})
}

func TestParseGroupBy(t *testing.T) {
	for in, want := range map[string]failures.GroupBy{"": failures.ByCause, "cause": failures.ByCause, "queue": failures.ByQueue,
		"event_type": failures.ByEventType, "reason": failures.ByReason} {
		if got, err := failures.ParseGroupBy(in); err != nil || got != want {
			t.Errorf("ParseGroupBy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := failures.ParseGroupBy("Queue"); err == nil {
		t.Error(`ParseGroupBy("Queue") = nil error`)
	}
}

func TestIsFingerprint(t *testing.T) {
	if fp := failures.Fingerprint("h", "r", "boom"); !failures.IsFingerprint(fp) {
		t.Errorf("IsFingerprint(%q) = false for a fingerprint", fp)
	}
	for _, s := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg", "../../../etc/pas"} {
		if failures.IsFingerprint(s) {
			t.Errorf("IsFingerprint(%q) = true", s)
		}
	}
}

// The PostgreSQL ledger answers groups from its counts, which triggers
// keep as failures are recorded, re-driven, released, failed again,
// edited, archived, deleted and pruned, some of it at once from several
// connections. After each step the counts answer as the failures
// themselves do (a filter on time reads the failures: Since the epoch
// selects the same).
func TestTheCountsFollowEveryChange(t *testing.T) {
	ctx := context.Background()
	l := failures.NewPostgres(testenv.Postgres(t).Pool)
	check := func(step string) {
		t.Helper()
		for _, f := range []failures.Filter{{}, {Status: failures.Unresolved}, {Status: failures.Redriving}, {FailedQueue: "alpha"},
			{AnyStatus: true}, {Status: failures.Archived, EventName: "demo.b.v1"}} {
			for _, by := range failures.GroupBys {
				got, err := l.Groups(ctx, f, by)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				f.Since = time.Unix(1, 0)
				want, err := l.Groups(ctx, f, by)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				f.Since = time.Time{}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: groups of %+v by %s from the counts:\n%+v\nfrom the failures:\n%+v", step, f, by, got, want)
				}
			}
		}
		counts, err := l.Unresolved(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range counts {
			n += c.N
		}
		if want := len(list(t, l, failures.Filter{Status: failures.Unresolved}, failures.Page{})); n != want {
			t.Errorf("%s: Unresolved counts %d failures, the list %d", step, n, want)
		}
	}
	var fs []failures.Failure
	for i := range 60 {
		f := failure([]string{"alpha", "beta"}[i%2], i, []string{"boom", "dial 10.0.0.1: refused", "bad json"}[i%3])
		if i%4 == 0 {
			f.EventName = "demo.b.v1"
		}
		fs = append(fs, f)
	}
	record(t, l, fs...)
	check("recorded")
	ids, err := l.Select(ctx, failures.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.Redrive(ctx, ids[:20], 1); err != nil || n != 20 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	check("re-driving")
	again := []failures.Failure{fs[0], fs[1], fs[2]}
	for i := range again {
		again[i].LastFailureAt = again[i].LastFailureAt.Add(time.Hour)
		again[i].Error = "failed again"
		again[i].Fingerprint = failures.Fingerprint(again[i].Handler, again[i].Reason, again[i].Error)
	}
	record(t, l, again...)
	check("failed again")
	if err := l.Release(ctx, ids[3:8], 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Mark(ctx, ids[8:20], failures.Redriving, failures.Resolved); err != nil {
		t.Fatal(err)
	}
	check("released and resolved")
	if _, err := l.Edit(ctx, ids[30], failures.Edition{Body: []byte(`{}`), EventName: "demo.c.v1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Mark(ctx, ids[40:50], failures.Unresolved, failures.Archived); err != nil {
		t.Fatal(err)
	}
	check("edited and archived")
	if _, err := l.Delete(ctx, ids[50:53]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prune(ctx, t0.Add(time.Hour), 7); err != nil {
		t.Fatal(err)
	}
	check("deleted and pruned")

	// Four writers re-drive and release failures of their own while the
	// groups are read; no one deadlocks, and the counts end right.
	live, err := l.Select(ctx, failures.Filter{Status: failures.Unresolved})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 5)
	for w := range 4 {
		go func() {
			var err error
			for round := range 15 {
				mine := live[w*len(live)/4 : (w+1)*len(live)/4]
				id := int64(100 + w*100 + round)
				if _, err = l.Redrive(ctx, mine, id); err != nil {
					break
				}
				if err = l.Release(ctx, mine[:len(mine)/2], id); err != nil {
					break
				}
				if _, err = l.Mark(ctx, mine, failures.Redriving, failures.Unresolved); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	go func() {
		var err error
		for range 20 {
			if _, err = l.Groups(ctx, failures.Filter{}, failures.ByCause); err != nil {
				break
			}
		}
		errs <- err
	}()
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	check("after the writers")
}
