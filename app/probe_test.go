package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/moenda/moenda/adapters/testenv"
	"github.com/moenda/moenda/configs"
	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/notificacoes"
	"github.com/moenda/moenda/handlers/tarefas"
)

// The probe plugin serves the failure tests. Its handlers record every
// run, write an effect row in the delivery's unit of work (no unique key,
// so a second effect shows), and fail as the event's payload asks.

// probeOrder is what a probe event asks its handler to do.
type probeOrder struct {
	// Fail is how many runs fail before one succeeds; -1 fails for ever.
	Fail int `json:"fail"`
	// Hold, on the first run, writes the effect, creates the file Hold and
	// then waits inside the transaction until the process is killed
	// (unless PROBE_NO_HOLD is set, as in the restarted process). With
	// PROBE_NO_FAIL set (a restarted process whose cause was fixed), no
	// run fails.
	Hold string `json:"hold,omitempty"`
	// WaitMillis, on the first run, is how long the handler waits on its
	// context before its unit of work, as a call to a slow service would;
	// it fails with the context's error if the context ends first.
	WaitMillis int `json:"wait_ms,omitempty"`
}

// probeRuns records the runs of each event's handler.
type probeRuns struct {
	mu   sync.Mutex
	runs map[string][]time.Time // by event id
}

func (r *probeRuns) add(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string][]time.Time{}
	}
	r.runs[id] = append(r.runs[id], time.Now())
	return len(r.runs[id])
}

func (r *probeRuns) of(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.runs[id]...)
}

// probePlugin consumes probe.work (probe.work.hit.v1 only), probe.slow
// and probe.wait.
func probePlugin(runs *probeRuns) handlers.Definition {
	return handlers.Define(handlers.Spec{
		Name: "probe",
		Subscriptions: []handlers.Subscription{
			{Name: "work", Events: []string{"probe.work.*"}, Handles: []string{"probe.work.hit.v1"}},
			{Name: "slow", Events: []string{"probe.slow.*"}},
			{Name: "wait", Events: []string{"probe.wait.*"}},
		},
	}, struct{}{}, func(_ struct{}, deps handlers.Deps) (handlers.Plugin, error) {
		handle := func(queue string) handlers.HandlerFunc {
			return func(ctx context.Context, e event.Event) error {
				var o probeOrder
				if err := json.Unmarshal(e.Payload, &o); err != nil {
					return event.Permanent(err)
				}
				n := runs.add(e.ID)
				if o.WaitMillis > 0 && n == 1 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Duration(o.WaitMillis) * time.Millisecond):
					}
				}
				return deps.Tx.InTx(ctx, func(ctx context.Context, tx handlers.Tx) error {
					if _, err := tx.Postgres().Exec(ctx, `INSERT INTO probe_effects (queue, event_id) VALUES ($1, $2)`, queue, e.ID); err != nil {
						return err
					}
					if o.Hold != "" && n == 1 && os.Getenv("PROBE_NO_HOLD") == "" {
						if err := os.WriteFile(o.Hold, nil, 0o600); err != nil {
							return err
						}
						time.Sleep(time.Hour) // killed here
					}
					if os.Getenv("PROBE_NO_FAIL") == "" && (o.Fail < 0 || n <= o.Fail) {
						return errors.New("probe: failing as asked")
					}
					return nil
				})
			}
		}
		return handlers.Plugin{Handlers: map[string]handlers.HandlerFunc{
			"work": handle("probe.work"), "slow": handle("probe.slow"), "wait": handle("probe.wait"),
		}}, nil
	})
}

// probeConfig is the test environment with the probe plugin alone, on an
// exchange of its own; probe.slow redelivers after 200, 400 and 800 ms
// and probe.wait after 30 s, both with no immediate retries.
const probeConfig = `log: {level: info}
postgres: {url: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
outbox: {poll_interval: 200ms, retry_interval: 50ms}
router: {close_timeout: 5s}
handlers: {enabled: [probe]}
topology:
  failure:
    immediate_interval: 10ms
    delays: [100ms, 200ms]
  exchanges:
    - name: probe.events
      events: ["probe.#"]
  subscriptions:
    - queue: probe.slow
      failure: {immediate_retries: 0, delays: [200ms, 400ms, 800ms]}
    - queue: probe.wait
      failure: {immediate_retries: 0, delays: [30s]}
`

// probeFiles are the shipped configs plus the probe environment.
func probeFiles(t *testing.T) fstest.MapFS {
	t.Helper()
	base, err := configs.FS.ReadFile("base.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{"base.yaml": {Data: base}, "probe.yaml": {Data: []byte(probeConfig)}}
}

// probeStack is a database with the probe's effect table and a vhost.
type probeStack struct {
	db    testenv.Database
	vhost testenv.VHost
	runs  *probeRuns
	extra []string              // more settings, such as Kafka's
	kafka *testenv.KafkaCluster // the cluster, when on Kafka (onKafka)
}

func newProbeStack(t *testing.T) *probeStack {
	t.Helper()
	s := &probeStack{db: testenv.EmptyPostgres(t), vhost: testenv.RabbitMQ(t), runs: &probeRuns{}}
	if _, err := s.db.Pool.Exec(context.Background(), `CREATE TABLE probe_effects (queue TEXT NOT NULL, event_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *probeStack) environ() []string {
	return append([]string{"MOENDA_POSTGRES__URL=" + s.db.URL, "MOENDA_AMQP__URL=" + s.vhost.URL}, s.extra...)
}

// start runs a platform with the probe plugin on the stack. On Kafka it
// returns once the probe's consumer groups have all their members: a
// queue's group has one per topic it reads (its exchange's, one per
// retry delay of probeConfig, its re-drive topic's), and they join one
// by one. Each join rebalances the group, and a record handled across a
// rebalance comes again: at least once, as Kafka promises, but a test
// counting runs or dead letters would count it twice.
func (s *probeStack) start(t *testing.T) running {
	t.Helper()
	p := s.startFiles(t, probeFiles(t))
	if s.kafka != nil {
		settled(t, *s.kafka, map[string]int{"probe.work": 4, "probe.slow": 5, "probe.wait": 3})
	}
	return p
}

// startFiles is start with the configuration files of files.
func (s *probeStack) startFiles(t *testing.T, files fs.FS) running {
	t.Helper()
	return startWith(t, probeRegistry(t, s.runs), files, "probe", s.environ()...)
}

// probeRegistry registers the probe plugin, recording its runs in runs,
// beside tarefas and notificacoes, which a test may enable with it.
func probeRegistry(t *testing.T, runs *probeRuns) *handlers.Registry {
	t.Helper()
	return registryOf(t, tarefas.Plugin(), notificacoes.Plugin(), probePlugin(runs))
}

// effects counts the effect rows of one event.
func (s *probeStack) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM probe_effects WHERE event_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// publish posts a probe event through the API (outbox and relay) and
// returns its id.
func publish(t *testing.T, p running, name string, o probeOrder) string {
	t.Helper()
	payload, _ := json.Marshal(o)
	code, body := call(t, "POST", p.base+"/v1/events", fmt.Sprintf(`{"event_name":%q,"payload":%s}`, name, payload))
	if code != 202 {
		t.Fatalf("POST /v1/events = %d %v", code, body)
	}
	return body["event_id"].(string)
}
