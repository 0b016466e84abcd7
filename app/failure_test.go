package app

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/handlers/event"
)

// publishRaw publishes body to the probe exchange on ch, as any AMQP
// client would, with message_id id.
func publishRaw(t *testing.T, ch *amqp091.Channel, key, id string, body []byte, headers amqp091.Table) {
	t.Helper()
	if err := ch.Publish("probe.events", key, false, false, amqp091.Publishing{MessageId: id, Body: body, Headers: headers, DeliveryMode: amqp091.Persistent}); err != nil {
		t.Fatal(err)
	}
}

// exhaustRetries publishes a probe.slow event that fails every time, waits
// for its dead letter (dead counts them) and a second more for a second
// one or a further run to show, and returns the event's id and the times
// of its runs, which must be four: the first and one after each delay.
func exhaustRetries(t *testing.T, s *probeStack, p running, dead func() int) (string, []time.Time) {
	t.Helper()
	id := publish(t, p, "probe.slow.hit.v1", probeOrder{Fail: -1})
	testenv.Eventually(t, 30*time.Second, "the dead letter", func() bool { return dead() > 0 })
	time.Sleep(time.Second) // no second dead letter, no further run
	runs := s.runs.of(id)
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4 (1 + 3 delays)", len(runs))
	}
	return id, runs
}

func TestFailTwiceThenSucceedWithinTheImmediateTier(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	id := publish(t, p, "probe.work.hit.v1", probeOrder{Fail: 2})
	testenv.Eventually(t, 10*time.Second, "the handled event", func() bool { return p.stats.Queue("probe.work").Handled.Load() == 1 })
	time.Sleep(300 * time.Millisecond) // past the first delay, had there been one
	st := p.stats.Queue("probe.work")
	if n := s.effects(t, id); n != 1 || len(s.runs.of(id)) != 3 || st.RetriedImmediately.Load() != 2 || st.RetriedLater.Load() != 0 {
		t.Fatalf("effects %d, runs %d, immediate retries %d, delayed %d", n, len(s.runs.of(id)), st.RetriedImmediately.Load(), st.RetriedLater.Load())
	}
}

// With the schedule [200ms, 400ms, 800ms], each failure sends the event to
// the retry queue of the next delay, whose TTL is that delay and which
// dead-letters back to the queue; then exactly one dead letter arrives
// with every failure header; through classic and through quorum queues.
// The delays are RabbitMQ's TTLs, which no clock of the process drives, so
// the schedule is asserted where it is exact (the queues declared, the
// copies made, in order, and the headers) and the redeliveries' timing
// only within a wide bound.
func TestAlwaysFailingFollowsTheScheduleThenDeadLetters(t *testing.T) {
	forEachQueueType(t, testAlwaysFailingFollowsTheScheduleThenDeadLetters)
}

func testAlwaysFailingFollowsTheScheduleThenDeadLetters(t *testing.T, s *probeStack, typ string) {
	p := s.start(t)
	requireQueueTypes(t, s.vhost.Name, typ)
	dead := testenv.Consume(t, s.vhost.URL, "probe.slow.dlq")
	id, runs := exhaustRetries(t, s, p, func() int { return len(dead()) })
	queues := declaredQueues(t, s.vhost.Name)
	for _, d := range slowDelays {
		name := topology.RetryQueue("probe.slow", d)
		want := map[string]string{topology.ArgMessageTTL: fmt.Sprint(d.Milliseconds()), topology.ArgDeadLetterExchange: "", topology.ArgDeadLetterRoutingKey: "probe.slow"}
		for k, v := range want {
			if got, ok := queues[name][k]; !ok || got != v {
				t.Errorf("retry queue %s: %s = %q, want %q (declared: %v)", name, k, got, v, queues[name])
			}
		}
	}
	requireSchedule(t, p, id, runs)
	if got := dead(); len(got) != 1 {
		t.Fatalf("%d dead letters, want 1", len(got))
	}
	d := dead()[0]
	if d.MessageId != id || s.effects(t, id) != 0 {
		t.Fatalf("dead letter %s (want %s), effects %d", d.MessageId, id, s.effects(t, id))
	}
	h := func(k string) string { v, _ := d.Headers[k].(string); return v }
	want := map[string]string{
		event.HeaderReason: event.ReasonRetriesExhausted, event.HeaderError: "probe: failing as asked",
		event.HeaderQueue: "probe.slow", event.HeaderHandler: "probe/slow", event.HeaderAttempts: "4",
		event.HeaderOriginalExchange: "probe.events", event.HeaderOriginalRoutingKey: "probe.slow.hit",
		event.HeaderEventID: id, event.HeaderCorrelationID: d.CorrelationId,
	}
	for k, v := range want {
		if h(k) != v {
			t.Errorf("header %s = %q, want %q", k, h(k), v)
		}
	}
	first, err1 := time.Parse(time.RFC3339Nano, h(event.HeaderFirstFailureAt))
	last, err2 := time.Parse(time.RFC3339Nano, h(event.HeaderLastFailureAt))
	if err1 != nil || err2 != nil || last.Sub(first) < time.Second {
		t.Errorf("failure times %q .. %q", h(event.HeaderFirstFailureAt), h(event.HeaderLastFailureAt))
	}
	if d.CorrelationId == "" {
		t.Error("the dead letter lost its correlation id")
	}
	testenv.Eventually(t, 2*time.Second, "the WARN line", func() bool {
		return contains(p.logs.String(), `level=WARN msg="event dead-lettered"`, "event_id="+id, "reason=retries_exhausted", "queue=probe.slow")
	})
}

// slowDelays are probe.slow's redelivery delays (probeConfig).
var slowDelays = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}

// requireSchedule checks that event id, failing every time, went through
// probe.slow's schedule: one retry copy per delay, in order, each logged
// with its attempt, and each redelivery (runs are the handler's) after
// its delay. A busy machine makes a redelivery late, never early, so the
// upper bound only catches one gone far astray.
func requireSchedule(t *testing.T, p running, id string, runs []time.Time) {
	t.Helper()
	var copies []string
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if contains(line, `msg="handler failed: the broker hands the event back later"`, "event_id="+id) {
			copies = append(copies, retryRE.FindString(line))
		}
	}
	wantCopies := []string{"attempt=1 attempts=4 retry_in=200ms", "attempt=2 attempts=4 retry_in=400ms", "attempt=3 attempts=4 retry_in=800ms"}
	if !slices.Equal(copies, wantCopies) {
		t.Errorf("retry copies %q, want %q", copies, wantCopies)
	}
	for i, want := range slowDelays {
		if gap := runs[i+1].Sub(runs[i]); gap < want*7/10 || gap > want+3*time.Second {
			t.Errorf("redelivery %d came after %s, want %s", i+1, gap, want)
		}
	}
}

// envelope returns a probe envelope named name asking o, as any producer
// would write it.
func envelope(t *testing.T, id, name string, o probeOrder) []byte {
	t.Helper()
	payload, _ := json.Marshal(o)
	body, err := json.Marshal(event.Event{ID: id, Name: name, OccurredAt: time.Now().UTC(), CorrelationID: "corr-" + id[:8], Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// While one message waits 30 s for its redelivery, the queue goes on:
// 1,000 healthy events are handled and the waiting one is still away. The
// delay is long so that the verdict does not hang on how fast a busy
// machine handles the thousand; that a delayed copy comes back after its
// delay is TestAlwaysFailingFollowsTheScheduleThenDeadLetters' to show.
func TestAWaitingMessageBlocksNothing(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	ch := testenv.Channel(t, s.vhost.URL)
	poison := publish(t, p, "probe.wait.hit.v1", probeOrder{Fail: 1})
	testenv.Eventually(t, 10*time.Second, "the first failure", func() bool { return p.stats.Queue("probe.wait").RetriedLater.Load() == 1 })
	healthy := make([]string, 1000)
	for i := range healthy {
		healthy[i] = uuid.NewString()
		publishRaw(t, ch, "probe.wait.hit", healthy[i], envelope(t, healthy[i], "probe.wait.hit.v1", probeOrder{}), nil)
	}
	testenv.Eventually(t, 25*time.Second, "the healthy events, handled", func() bool {
		for _, id := range healthy {
			if len(s.runs.of(id)) != 1 {
				return false
			}
		}
		return true
	})
	if n := len(s.runs.of(poison)); n != 1 {
		t.Fatalf("the waiting event ran %d times before its 30 s delay ended, want 1", n)
	}
	if n := p.stats.Queue("probe.wait").RetriedLater.Load(); n != 1 {
		t.Fatalf("%d events sent to wait, want 1", n)
	}
}

// Bodies no retry can fix reach the dead-letter queue after one attempt,
// each with its reason; events without ids are not deduplicated against
// each other. Through classic and through quorum queues.
func TestMalformedMessagesAreDeadLetteredAtOnce(t *testing.T) {
	forEachQueueType(t, testMalformedMessagesAreDeadLetteredAtOnce)
}

func testMalformedMessagesAreDeadLetteredAtOnce(t *testing.T, s *probeStack, typ string) {
	p := s.start(t)
	requireQueueTypes(t, s.vhost.Name, typ)
	ch := testenv.Channel(t, s.vhost.URL)
	dead := testenv.Consume(t, s.vhost.URL, "probe.work.dlq")
	valid := string(envelope(t, uuid.NewString(), "probe.work.hit.v1", probeOrder{}))
	bodies := map[string][]byte{
		event.ReasonDecode:          []byte(`{"event_id":`),
		event.ReasonInvalidEncoding: append([]byte(valid[:30]), 0xff, 0xfe),
		event.ReasonMissingEventID:  []byte(`{"event_name":"probe.work.hit.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{}}`),
	}
	for _, b := range bodies {
		publishRaw(t, ch, "probe.work.hit", "", b, nil) // no message_id either
	}
	publishRaw(t, ch, "probe.work.hit", "", []byte(`{"event_name":"probe.work.hit.v1","occurred_at":"2026-01-15T10:30:00Z","payload":{"x":1}}`), nil)
	testenv.Eventually(t, 10*time.Second, "four dead letters", func() bool { return len(dead()) == 4 })
	reasons := map[string]int{}
	for _, d := range dead() {
		reasons[d.Headers[event.HeaderReason].(string)]++
		if d.Headers[event.HeaderAttempts] != "1" {
			t.Errorf("a %s dead letter after %v attempts", d.Headers[event.HeaderReason], d.Headers[event.HeaderAttempts])
		}
	}
	if reasons[event.ReasonDecode] != 1 || reasons[event.ReasonInvalidEncoding] != 1 || reasons[event.ReasonMissingEventID] != 2 {
		t.Fatalf("reasons %v", reasons)
	}
	if n := p.stats.Queue("probe.work").Handled.Load() + p.stats.Queue("probe.work").Failed.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// A type the subscription does not handle is acknowledged and counted; a
// version of a handled type it does not declare is dead-lettered.
func TestUnknownTypesAreIgnoredAndUnknownVersionsDeadLettered(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	dead := testenv.Consume(t, s.vhost.URL, "probe.work.dlq")
	publish(t, p, "probe.work.other.v1", probeOrder{})
	v2 := publish(t, p, "probe.work.hit.v2", probeOrder{})
	testenv.Eventually(t, 10*time.Second, "the unknown version's dead letter", func() bool { return len(dead()) == 1 })
	testenv.Eventually(t, 5*time.Second, "the ignored type", func() bool { return p.stats.Queue("probe.work").Ignored.Load() == 1 })
	if d := dead()[0]; d.MessageId != v2 || d.Headers[event.HeaderReason] != event.ReasonUnknownVersion {
		t.Fatalf("dead letter %s: %v", d.MessageId, d.Headers)
	}
}

// The same event delivered five times, at once, to two consumers in two
// processes' worth of platforms: one run, one effect; from classic and
// from quorum queues.
func TestConcurrentDuplicatesHaveOneEffect(t *testing.T) {
	forEachQueueType(t, testConcurrentDuplicatesHaveOneEffect)
}

func testConcurrentDuplicatesHaveOneEffect(t *testing.T, s *probeStack, typ string) {
	a, b := s.start(t), s.start(t)
	requireQueueTypes(t, s.vhost.Name, typ)
	ch := testenv.Channel(t, s.vhost.URL)
	id := uuid.NewString()
	body := envelope(t, id, "probe.work.hit.v1", probeOrder{})
	for range 5 {
		publishRaw(t, ch, "probe.work.hit", id, body, nil)
	}
	dups := func() int64 {
		return a.stats.Queue("probe.work").Duplicates.Load() + b.stats.Queue("probe.work").Duplicates.Load()
	}
	testenv.Eventually(t, 10*time.Second, "four duplicates acknowledged", func() bool { return dups() == 4 })
	if n, runs := s.effects(t, id), len(s.runs.of(id)); n != 1 || runs != 1 {
		t.Fatalf("%d effects, %d runs", n, runs)
	}
	if a.stats.Queue("probe.work").Handled.Load()+b.stats.Queue("probe.work").Handled.Load() != 1 {
		t.Fatal("handled more than once")
	}
}

// Headers that are not strings (x-death as the broker writes it, integers
// from another client) are read, and the message handled normally.
func TestNonStringHeadersAreHandled(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	ch := testenv.Channel(t, s.vhost.URL)
	dead := testenv.Consume(t, s.vhost.URL, "probe.work.dlq")
	id := uuid.NewString()
	headers := amqp091.Table{
		"x-death":          []any{amqp091.Table{"count": int64(1), "queue": "elsewhere", "reason": "expired", "time": time.Now()}},
		"x-delivery-count": int64(3),
		"priority-hint":    int32(5),
		"flag":             true,
	}
	publishRaw(t, ch, "probe.work.hit", id, envelope(t, id, "probe.work.hit.v1", probeOrder{}), headers)
	testenv.Eventually(t, 10*time.Second, "the handled event", func() bool { return s.effects(t, id) == 1 })
	time.Sleep(200 * time.Millisecond)
	if len(dead()) != 0 || p.stats.Queue("probe.work").Failed.Load() != 0 {
		t.Fatalf("dead letters %d, failures %d", len(dead()), p.stats.Queue("probe.work").Failed.Load())
	}
}

// retryRE reads the attempt, the schedule's length and the delay from a
// retry copy's log line.
var retryRE = regexp.MustCompile(`attempt=\d+ attempts=\d+ retry_in=\S+`)

// declaredQueues reads the arguments of every queue RabbitMQ holds in
// vhost, by queue name.
func declaredQueues(t *testing.T, vhost string) map[string]map[string]string {
	t.Helper()
	queues := map[string]map[string]string{}
	out := testenv.Rabbitmqctl(t, "list_queues", "-p", vhost, "name", "arguments", "--no-table-headers")
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		name, raw, _ := strings.Cut(line, "\t")
		args := map[string]string{}
		for _, m := range argRE.FindAllStringSubmatch(raw, -1) {
			v := m[2] + m[3]
			if v == "[]" { // an empty binary, printed as an Erlang list
				v = ""
			}
			args[m[1]] = v
		}
		queues[name] = args
	}
	return queues
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// A queue configured for seed 001's envelope reads what a plain AMQP
// client publishes in it: the event is handled once, its id keys the
// inbox, an unknown field changes nothing, and an unknown type is ignored
// without a failure or a dead letter.
func TestSeed001EnvelopeFromAPlainClient(t *testing.T) {
	s := newProbeStack(t)
	files := probeFiles(t)
	files["probe.yaml"] = &fstest.MapFile{Data: []byte(strings.Replace(probeConfig, "  subscriptions:\n",
		"  subscriptions:\n    - queue: probe.work\n      envelope: seed001\n", 1))}
	p := s.startFiles(t, files)
	dead := testenv.Consume(t, s.vhost.URL, "probe.work.dlq")
	ch := testenv.Channel(t, s.vhost.URL)
	seed001 := func(id, tipo string) []byte {
		return []byte(`{"id":"` + id + `","tipo":"` + tipo + `","versao":1,"ocorridoEm":"2026-11-30T12:00:00Z","origem":"pedidos","dados":{"fail":0},"campoNovo":true}`)
	}
	id, other := uuid.NewString(), uuid.NewString()
	publishRaw(t, ch, "probe.work.hit", id, seed001(id, "probe.work.hit"), nil)
	publishRaw(t, ch, "probe.work.hit", id, seed001(id, "probe.work.hit"), nil) // delivered twice
	publishRaw(t, ch, "probe.work.other", other, seed001(other, "probe.work.other"), nil)
	st := p.stats.Queue("probe.work")
	testenv.Eventually(t, 10*time.Second, "the event handled and the other type ignored", func() bool {
		return st.Handled.Load() == 1 && st.Ignored.Load() == 1 && st.Duplicates.Load() == 1
	})
	time.Sleep(300 * time.Millisecond) // past the retry delays, had anything failed
	if n := s.effects(t, id); n != 1 || len(dead()) != 0 || st.Failed.Load() != 0 {
		t.Fatalf("effects %d (want 1), dead letters %d, failures %d", n, len(dead()), st.Failed.Load())
	}
}

// A delivery that meets a read-only database (25006: a primary demoted by
// a failover, its address not moved yet) goes back to its queue without
// spending an attempt, for as long as that lasts: nothing goes to a retry
// queue or the dead-letter queue, and the event is handled once the
// database takes writes again. The inbox's claim, the unit's first
// write, meets it before the handler runs. The test makes its own
// database read-only.
func TestAReadOnlyDatabaseSpendsNoAttempt(t *testing.T) {
	s := newProbeStack(t)
	p := s.start(t)
	dead := testenv.Consume(t, s.vhost.URL, "probe.work.dlq")
	writable := readOnly(t, p.pool)

	e, err := event.New("probe.work.hit.v1", "test", probeOrder{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, testenv.Channel(t, s.vhost.URL), "probe.work.hit", e.ID, body, nil)
	st := p.stats.Queue("probe.work")
	// The first pause is a second (router.UnavailablePause); the test
	// schedule's retries take 0.3 s in all.
	testenv.Eventually(t, 10*time.Second, "the event back in its queue and delivered again", func() bool { return st.Redelivered.Load() > 0 })
	time.Sleep(time.Second)
	if runs := len(s.runs.of(e.ID)); st.RetriedLater.Load() != 0 || len(dead()) != 0 || st.Handled.Load() != 0 || runs != 0 {
		t.Fatalf("on a read-only database: %d retries through the broker, %d dead letters, %d handled, %d handler runs; want the event waiting in its queue",
			st.RetriedLater.Load(), len(dead()), st.Handled.Load(), runs)
	}
	writable()
	testenv.Eventually(t, 40*time.Second, "the event handled once the database takes writes", func() bool { return s.effects(t, e.ID) == 1 })
	if st.RetriedLater.Load() != 0 || len(dead()) != 0 {
		t.Fatalf("%d retries through the broker, %d dead letters", st.RetriedLater.Load(), len(dead()))
	}
}
