package redrive_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/failures"
	"github.com/moenda/moenda/adapters/redrive"
	"github.com/moenda/moenda/adapters/testenv"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// clock is a Clock the test drives: After fires at once and moves Now by
// the wait.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// spend moves Now by d: work that takes time.
func (c *clock) spend(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// queues is the broker side of a test: what was sent where, and the
// consumers' verdicts. A queue in failing fails what it gets again: its
// dead letter comes back to the ledger, as ingest would bring it.
type queues struct {
	t      *testing.T
	ledger failures.Ledger
	clock  *clock
	// cost is how long each send takes, on clock.
	cost    time.Duration
	mu      sync.Mutex
	sentAt  []time.Time
	sent    map[string][]string // queue -> event ids, in order
	lost    map[string]bool     // event ids taken and never handled
	counts  []string            // each copy's re-drive count, in order
	handled map[string]bool     // queue + event id
	failing map[string]bool     // event ids
	down    bool
}

func (q *queues) Redeliver(ctx context.Context, queue string, msg *message.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.down {
		return fmt.Errorf("the broker is away")
	}
	q.sentAt = append(q.sentAt, q.clock.Now())
	q.counts = append(q.counts, msg.Metadata.Get(redrive.HeaderRedriveCount))
	q.clock.spend(q.cost)
	q.sent[queue] = append(q.sent[queue], msg.UUID)
	if msg.Metadata.Get(redrive.HeaderRedriveID) == "" || msg.Metadata.Get("moenda-attempts") != "" {
		q.t.Errorf("copy of %s: headers %v, want a re-drive id and no failure story", msg.UUID, msg.Metadata)
	}
	if q.lost[msg.UUID] {
		return nil
	}
	if !q.failing[msg.UUID] {
		q.handled[queue+"/"+msg.UUID] = true
		return nil
	}
	// It dead-letters again: the ledger hears of it later.
	again := failure(queue, msg.UUID, t0.Add(time.Hour), "boom again")
	_, err := q.ledger.Record(ctx, []failures.Failure{again})
	return err
}

// Republish is a send to an exchange: recorded under "exchange/key", and
// handled by the queue that failed, as its binding would deliver it.
func (q *queues) Republish(ctx context.Context, exchange, key string, msg *message.Message) error {
	if err := q.Redeliver(ctx, exchange+"/"+key, msg); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.handled["q/"+msg.UUID] = true
	return nil
}

func (q *queues) Handled(_ context.Context, queue string, eventIDs []string) (map[string]bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]bool{}
	for _, id := range eventIDs {
		if q.handled[queue+"/"+id] {
			out[id] = true
		}
	}
	return out, nil
}

func failure(queue, id string, at time.Time, errText string) failures.Failure {
	f := failures.Failure{Queue: queue + ".dlq", EventID: id, FailedQueue: queue, Handler: queue, Reason: "retries_exhausted",
		Error: errText, Occurrences: 1, FirstFailureAt: at, LastFailureAt: at, Status: failures.Unresolved,
		Headers: map[string]string{"moenda-attempts": "4", "event_name": "demo.a.v1"}, Body: []byte(`{}`)}
	f.Fingerprint = failures.Fingerprint(f.Handler, f.Reason, f.Error)
	return f
}

// stack is a ledger holding n failures of queue q (ev-0 ...), a store
// and a runner over them, on PostgreSQL or in memory.
type stack struct {
	ledger failures.Ledger
	store  redrive.Store
	q      *queues
	clock  *clock
	runner *redrive.Runner
	ids    []int64
}

func onEveryStore(t *testing.T, n int, test func(t *testing.T, s *stack)) {
	for name, make := range map[string]func(t *testing.T) (failures.Ledger, redrive.Store){
		"postgres": func(t *testing.T) (failures.Ledger, redrive.Store) {
			db := testenv.Postgres(t)
			return failures.NewPostgres(db.Pool), redrive.NewPostgres(db.Pool)
		},
		"memory": func(*testing.T) (failures.Ledger, redrive.Store) {
			now := func() time.Time { return t0 }
			return failures.NewMemory(now), redrive.NewMemory(now)
		},
	} {
		t.Run(name, func(t *testing.T) {
			l, st := make(t)
			s := &stack{ledger: l, store: st, clock: &clock{now: t0}}
			s.q = &queues{t: t, ledger: l, clock: s.clock, sent: map[string][]string{}, handled: map[string]bool{}, failing: map[string]bool{}, lost: map[string]bool{}}
			s.runner = &redrive.Runner{Store: st, Ledger: l, Sink: s.q, Handled: s.q.Handled, Clock: s.clock,
				Poll: time.Second, SettleTimeout: time.Hour, Logger: testenv.Logger()}
			var fs []failures.Failure
			for i := range n {
				fs = append(fs, failure("q", fmt.Sprintf("ev-%d", i), t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("boom %d", i)))
			}
			if _, err := l.Record(context.Background(), fs); err != nil {
				t.Fatal(err)
			}
			ids, err := l.Select(context.Background(), failures.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			s.ids = ids
			test(t, s)
		})
	}
}

func (s *stack) start(t *testing.T, o redrive.Options) int64 {
	t.Helper()
	ctx := context.Background()
	plan, err := redrive.MakePlan(ctx, s.ledger, s.ids, o)
	if err != nil {
		t.Fatal(err)
	}
	id, err := redrive.Start(ctx, s.store, plan, o, "test", map[string]string{"queue": "q"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (s *stack) get(t *testing.T, id int64) redrive.Redrive {
	t.Helper()
	rd, err := s.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// A canary of 2, then the rest at 200/s: each failure handled once by the
// queue that failed, resolved in the ledger, at the rate asked.
func TestARedriveStartToFinish(t *testing.T) {
	onEveryStore(t, 6, func(t *testing.T, s *stack) {
		id := s.start(t, redrive.Options{Canary: 2, Rate: 200})
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		rd := s.get(t, id)
		if rd.State != redrive.Done || rd.Counters.Handled != 6 || rd.Counters.Planned != 6 {
			t.Fatalf("re-drive %+v, want done with 6 handled", rd)
		}
		if got := s.q.sent["q"]; len(got) != 6 || got[0] != "ev-0" || got[5] != "ev-5" {
			t.Errorf("sent %v, want each of ev-0..ev-5 once, oldest first", got)
		}
		resolved, _ := s.ledger.Select(context.Background(), failures.Filter{Status: failures.Resolved})
		if len(resolved) != 6 {
			t.Errorf("%d failures resolved, want 6", len(resolved))
		}
		if fmt.Sprint(s.q.counts) != "[1 1 1 1 1 1]" {
			t.Errorf("re-drive counts %v, want 1 each: their first re-drive", s.q.counts)
		}
		for i := 3; i < 6; i++ { // after the canary, 200/s
			if d := s.q.sentAt[i].Sub(s.q.sentAt[i-1]); d != 5*time.Millisecond {
				t.Errorf("send %d came %s after the one before, want 5ms (200/s)", i, d)
			}
		}
	})
}

// The rate holds whatever each send costs: the sends keep to a schedule
// rather than wait a full interval after each one.
func TestTheRateHoldsWhateverEachSendCosts(t *testing.T) {
	onEveryStore(t, 400, func(t *testing.T, s *stack) {
		s.q.cost = 3 * time.Millisecond
		id := s.start(t, redrive.Options{Rate: 200})
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 400 {
			t.Fatalf("re-drive %+v", rd)
		}
		first, last := s.q.sentAt[0], s.q.sentAt[len(s.q.sentAt)-1]
		if rate := 399 / last.Sub(first).Seconds(); rate < 199 || rate > 201 {
			t.Errorf("sent at %.1f/s, want 200/s", rate)
		}
	})
}

// A canary that fails again pauses the re-drive, naming it, and nothing
// beyond the canaries is sent.
func TestAFailingCanaryPausesTheRedrive(t *testing.T) {
	onEveryStore(t, 5, func(t *testing.T, s *stack) {
		s.q.failing["ev-1"] = true
		id := s.start(t, redrive.Options{Canary: 2})
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		rd := s.get(t, id)
		if rd.State != redrive.Paused || rd.Reason == "" || rd.Counters.Pending != 3 || rd.Counters.FailedAgain != 1 || rd.Counters.Handled != 1 {
			t.Fatalf("re-drive %+v, want paused with 3 pending, 1 handled, 1 failed again", rd)
		}
		if got := s.q.sent["q"]; len(got) != 2 {
			t.Errorf("sent %v: nothing beyond the canaries", got)
		}
		f, err := s.ledger.Get(context.Background(), s.ids[1])
		if err != nil || f.Status != failures.Unresolved || f.Occurrences != 2 {
			t.Errorf("the failed canary in the ledger: %+v, %v; want unresolved, 2 occurrences", f, err)
		}
	})
}

// The plan skips what a re-drive must not send, and says why.
func TestThePlanSkipsWithReasons(t *testing.T) {
	onEveryStore(t, 7, func(t *testing.T, s *stack) {
		ctx := context.Background()
		if _, err := s.ledger.Edit(ctx, s.ids[6], failures.Edition{Body: []byte(`{}`), EventName: "demo.a.v1"}); err != nil {
			t.Fatal(err)
		}
		s.ledger.Mark(ctx, s.ids[:1], failures.Unresolved, failures.Resolved)
		s.ledger.Mark(ctx, s.ids[1:2], failures.Unresolved, failures.Archived)
		s.ledger.Redrive(ctx, s.ids[2:3], 99) // in another re-drive now
		s.ledger.Redrive(ctx, s.ids[3:4], 98) // once re-driven, and back
		s.ledger.Mark(ctx, s.ids[3:4], failures.Redriving, failures.Unresolved)
		plan, err := redrive.MakePlan(ctx, s.ledger, s.ids, redrive.Options{MaxRedrives: 1, Max: 1, To: "queue:other"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"already resolved": 1, "archived": 1, "already in a running re-drive": 1,
			"re-driven 1 times already (failures.max_redrives is 1)": 1, "beyond the re-drive's --max": 1, "edited: its edit is re-driven instead": 1}
		if plan.Selected != 7 || plan.Send != 1 || plan.ByQueue["other"] != 1 || fmt.Sprint(plan.Skipped) != fmt.Sprint(want) {
			t.Errorf("plan %+v, want 1 to other and skipped %v", plan, want)
		}
		if _, err := redrive.MakePlan(ctx, s.ledger, s.ids, redrive.Options{To: "exchange"}); err == nil {
			t.Error("--to exchange: no error")
		}
	})
}

// Stopped in the middle (its process killed), a re-drive resumes where it
// was: none sent twice, none skipped.
func TestARedriveResumes(t *testing.T) {
	onEveryStore(t, 5, func(t *testing.T, s *stack) {
		id := s.start(t, redrive.Options{Rate: 1})
		ctx, cancel := context.WithCancel(context.Background())
		stopAfter := 2
		s.runner.Clock = &cancelling{clock: s.clock, after: &stopAfter, cancel: cancel}
		_ = s.runner.Run(ctx, id)
		if got := s.q.sent["q"]; len(got) == 0 || len(got) >= 5 {
			t.Fatalf("sent %v before the stop, want some", got)
		}
		s.runner.Clock = s.clock
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if got := s.q.sent["q"]; fmt.Sprint(got) != "[ev-0 ev-1 ev-2 ev-3 ev-4]" {
			t.Errorf("sent %v, want each once, in order", got)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 5 {
			t.Errorf("re-drive %+v", rd)
		}
	})
}

// cancelling is a clock that cancels after a number of waits: a process
// that dies mid re-drive.
type cancelling struct {
	*clock
	after  *int
	cancel context.CancelFunc
}

func (c *cancelling) After(d time.Duration) <-chan time.Time {
	if *c.after--; *c.after <= 0 {
		c.cancel()
	}
	return c.clock.After(d)
}

// A broker that refuses a send pauses the re-drive; resumed, it sends on.
func TestAnUnsentFailurePausesTheRedrive(t *testing.T) {
	onEveryStore(t, 2, func(t *testing.T, s *stack) {
		s.q.down = true
		id := s.start(t, redrive.Options{})
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		rd := s.get(t, id)
		if rd.State != redrive.Paused || rd.Counters.Pending != 2 {
			t.Fatalf("re-drive %+v, want paused with both pending", rd)
		}
		if f, _ := s.ledger.Get(context.Background(), s.ids[0]); f.Status != failures.Unresolved || f.Redrives != 0 {
			t.Errorf("the unsent failure is %s, re-driven %d times; want unresolved, never re-driven", f.Status, f.Redrives)
		}
		s.q.down = false
		if ok, err := s.store.Move(context.Background(), id, []redrive.State{redrive.Paused}, redrive.Running, ""); !ok || err != nil {
			t.Fatalf("resume: %v %v", ok, err)
		}
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 2 {
			t.Errorf("re-drive %+v after resuming", rd)
		}
	})
}

// A process that died between marking a failure re-driving and marking
// its item sending, or between marking it sending and the broker's
// answer, leaves the failure to the same re-drive, which sends it on
// resuming: not skipped, not stuck re-driving, not left unsettled.
func TestAResumedRedriveSendsWhatItHadMarked(t *testing.T) {
	onEveryStore(t, 3, func(t *testing.T, s *stack) {
		ctx := context.Background()
		id := s.start(t, redrive.Options{})
		if n, err := s.ledger.Redrive(ctx, s.ids[:2], id); err != nil || n != 2 {
			t.Fatalf("Redrive = %d, %v", n, err)
		}
		if err := s.store.Mark(ctx, id, []int{1}, redrive.Sending, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		if rd := s.get(t, id); rd.Counters.Sent != 1 {
			t.Fatalf("re-drive %+v, want the item being sent counted as sent", rd)
		}
		if err := s.runner.Run(ctx, id); err != nil {
			t.Fatal(err)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 3 || rd.Counters.Skipped != 0 || rd.Counters.Unsettled != 0 {
			t.Errorf("re-drive %+v, want 3 handled, none skipped or unsettled", rd)
		}
		if got := s.q.sent["q"]; len(got) != 3 {
			t.Errorf("sent %v, want each of the three", got)
		}
		for _, fid := range s.ids[:2] {
			if f, _ := s.ledger.Get(ctx, fid); f.Status != failures.Resolved || f.Redrives != 1 {
				t.Errorf("failure %+v, want resolved after one re-drive", f)
			}
		}
	})
}

// To the original exchange, as asked: each failure goes to the exchange
// and key it was first published with; one whose origin is not known (a
// foreign dead letter) is skipped, saying why.
func TestARedriveToTheOriginalExchange(t *testing.T) {
	onEveryStore(t, 0, func(t *testing.T, s *stack) {
		ctx := context.Background()
		ours, foreign := failure("q", "ev-ours", t0, "boom"), failure("q", "ev-foreign", t0.Add(time.Second), "boom")
		ours.OriginalExchange, ours.OriginalRoutingKey = "events", "demo.a"
		if _, err := s.ledger.Record(ctx, []failures.Failure{ours, foreign}); err != nil {
			t.Fatal(err)
		}
		s.ids, _ = s.ledger.Select(ctx, failures.Filter{})
		o := redrive.Options{To: redrive.ToOriginalExchange}
		plan, err := redrive.MakePlan(ctx, s.ledger, s.ids, o)
		if err != nil || plan.Send != 1 || len(plan.Skipped) != 1 {
			t.Fatalf("plan %+v, %v: want ours sent and the foreign one skipped", plan, err)
		}
		id := s.start(t, o)
		if err := s.runner.Run(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(s.q.sent); got != "map[events/demo.a:[ev-ours]]" {
			t.Errorf("sent %s, want ev-ours to exchange events with key demo.a", got)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 1 || rd.Counters.Skipped != 1 {
			t.Errorf("re-drive %+v", rd)
		}
	})
}

// A copy neither handled nor failed again within the settle timeout is
// unsettled, its failure unresolved again; the others settle as handled,
// their failures resolved.
func TestAnItemNeverHandledIsUnsettled(t *testing.T) {
	onEveryStore(t, 4, func(t *testing.T, s *stack) {
		s.q.lost["ev-2"] = true
		s.runner.SettleTimeout = 3 * time.Second
		id := s.start(t, redrive.Options{})
		if err := s.runner.Run(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if rd := s.get(t, id); rd.State != redrive.Done || rd.Counters.Handled != 3 || rd.Counters.Unsettled != 1 {
			t.Fatalf("re-drive %+v, want done with 3 handled and 1 unsettled", rd)
		}
		for i, want := range []failures.Status{failures.Resolved, failures.Resolved, failures.Unresolved, failures.Resolved} {
			if f, err := s.ledger.Get(context.Background(), s.ids[i]); err != nil || f.Status != want {
				t.Errorf("failure ev-%d: %s (%v), want %s", i, f.Status, err, want)
			}
		}
	})
}

// A re-drive cancelled while a stopped runner had items sending sends
// them no more: they settle as sent ones do, and none stays re-driving.
func TestACancelledRedriveSettlesWhatWasBeingSent(t *testing.T) {
	onEveryStore(t, 2, func(t *testing.T, s *stack) {
		ctx := context.Background()
		s.runner.SettleTimeout = 3 * time.Second
		id := s.start(t, redrive.Options{})
		// Both marked, the first sending: a stop caught the batch there.
		if n, err := s.ledger.Redrive(ctx, s.ids, id); err != nil || n != 2 {
			t.Fatalf("Redrive = %d, %v", n, err)
		}
		if err := s.store.Mark(ctx, id, []int{0}, redrive.Sending, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.store.Move(ctx, id, []redrive.State{redrive.Running}, redrive.Cancelled, "by test"); !ok || err != nil {
			t.Fatalf("cancel: %v %v", ok, err)
		}
		if err := s.runner.Run(ctx, id); err != nil {
			t.Fatal(err)
		}
		if got := s.q.sent["q"]; len(got) != 0 {
			t.Errorf("sent %v after the cancel, want nothing", got)
		}
		if rd := s.get(t, id); rd.Counters.Unsettled != 1 || rd.Counters.Pending != 1 {
			t.Errorf("re-drive %+v, want the item being sent unsettled and the other left pending", rd)
		}
		for i, want := range []int{1, 0} { // the first maybe sent, the other not
			if f, _ := s.ledger.Get(ctx, s.ids[i]); f.Status != failures.Unresolved || f.Redrives != want {
				t.Errorf("failure %+v, want unresolved again, re-driven %d times", f, want)
			}
		}
	})
}
