package harness

import (
	"fmt"
	"testing"
	"time"
)

// Recovery runs from the heal to the first event of the unbroken run of
// fast ones after it, and never ends before the consumers are back.
func TestRecoveries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var ops []Op
	var effects []Effect
	// Acknowledged at 10..19 s; those acknowledged before 14 s waited
	// 3 s, the later ones 100 ms.
	for i := range 10 {
		id := string(rune('a' + i))
		acked := at(10 + float64(i))
		lag := 3 * time.Second
		if i >= 4 {
			lag = 100 * time.Millisecond
		}
		ops = append(ops, Op{Outcome: OK, EventID: id, Kind: Good, At: acked})
		effects = append(effects, Effect{EventID: id, AppliedAt: acked.Add(lag)})
	}
	if l := Latencies(ops, effects); l.P50 != 100*time.Millisecond || l.Max != 3*time.Second {
		t.Fatalf("%+v", l)
	}
	faults := []Line{{Fault: "f", Phase: "start", Op: Op{At: at(5)}}, {Fault: "f", Phase: "stop", Op: Op{At: at(10)}}}
	rs := Recoveries(ops, effects, faults, 2*time.Second, nil)
	if len(rs) != 1 || rs[0].Took != 4100*time.Millisecond {
		t.Fatalf("%+v", rs)
	}
	back := func(time.Time) time.Time { return at(16) }
	if rs := Recoveries(ops, effects, faults, 2*time.Second, back); rs[0].Took != 6*time.Second {
		t.Fatalf("consumers back at 16 s: %+v", rs)
	}
	// An event still waiting when the next fault begins is that
	// fault's: with a fault from 19.5 s, j (acknowledged at 19 s,
	// applied at 19.1 s) still counts, and a late one would not.
	lateOps := append(ops[:len(ops):len(ops)], Op{Outcome: OK, EventID: "late", Kind: Good, At: at(19.4)})
	lateEffects := append(effects[:len(effects):len(effects)], Effect{EventID: "late", AppliedAt: at(40)})
	next := append(faults, Line{Fault: "g", Phase: "start", Op: Op{At: at(19.5)}})
	if rs := Recoveries(lateOps, lateEffects, next, 2*time.Second, nil); rs[0].Took != 4100*time.Millisecond {
		t.Fatalf("with a later fault: %+v", rs)
	}
	// A fault that the next one interrupts before it recovered is judged
	// by the first recovery after it: f, healed at 10 s, recovers at
	// 14.1 s although g struck at 13 s; g recovers then too.
	interrupted := append(faults[:2:2], Line{Fault: "g", Phase: "start", Op: Op{At: at(13)}}, Line{Fault: "g", Phase: "stop", Op: Op{At: at(13.1)}})
	rs = Recoveries(ops, effects, interrupted, 2*time.Second, nil)
	if len(rs) != 2 || rs[0].Took != 4100*time.Millisecond || rs[1].Took != time.Second {
		t.Fatalf("with a fault before the recovery: %+v", rs)
	}
	// One that never recovers, whatever came after, still says so.
	if rs := Recoveries(lateOps, lateEffects, interrupted, 2*time.Second, nil); rs[0].Took >= 0 || rs[1].Took >= 0 {
		t.Fatalf("never recovered: %+v", rs)
	}
	never := func(time.Time) time.Time { return time.Time{} }
	if rs := Recoveries(ops, effects, faults, 2*time.Second, never); rs[0].Recovered(time.Minute) {
		t.Fatalf("consumers never back: %+v", rs)
	}
}

func TestOnlyLoopback(t *testing.T) {
	for url, want := range map[string]bool{
		"postgres://postgres@127.0.0.1:5432/x": true, "amqp://guest:guest@localhost:5672/": true, "amqp://[::1]:5672/": true,
		"postgres://db.example.com/x": false, "amqp://10.0.0.5:5672/": false,
	} {
		if loopback(url) != want {
			t.Errorf("loopback(%s) = %v", url, !want)
		}
	}
}

// A recovery is the first run of fast events that holds for steadyFor:
// an excursion that begins later, with no fault injected, is not the
// last fault's (the system had recovered), while a system that falls
// back within steadyFor has not recovered before it settles.
func TestRecoveryIsTheFirstSteadyRun(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Events every 100 ms from 0 s to 30 s, each applied after lag(s).
	events := func(lag func(s float64) time.Duration) ([]Op, []Effect) {
		var ops []Op
		var effects []Effect
		for i := range 300 {
			s := float64(i) / 10
			id := fmt.Sprint(i)
			ops = append(ops, Op{Outcome: OK, EventID: id, Kind: Good, At: at(s)})
			effects = append(effects, Effect{EventID: id, AppliedAt: at(s).Add(lag(s))})
		}
		return ops, effects
	}
	healed := []Line{{Fault: "kill -9 n2", Phase: "start", Op: Op{At: at(-1)}}, {Fault: "kill -9 n2", Phase: "stop", Op: Op{At: at(0)}}}
	for _, c := range []struct {
		name string
		lag  func(s float64) time.Duration
		took time.Duration
	}{
		// T08 with seed 2: fast from the heal, then, 15 s later, the
		// loaded machine slowed everything for 5 s.
		{"an excursion long after the heal", func(s float64) time.Duration {
			if s >= 15 && s < 20 {
				return 2300 * time.Millisecond
			}
			return 300 * time.Millisecond
		}, 300 * time.Millisecond},
		// Slow until 2 s, fast for 3 s, slow again until 8 s: recovered
		// at 8 s, not 2 s.
		{"a relapse within steadyFor", func(s float64) time.Duration {
			if s < 2 || s >= 5 && s < 8 {
				return 3 * time.Second
			}
			return 300 * time.Millisecond
		}, 8300 * time.Millisecond},
	} {
		ops, effects := events(c.lag)
		rs := Recoveries(ops, effects, healed, 2*time.Second, nil)
		if len(rs) != 1 || rs[0].Took != c.took {
			t.Errorf("%s: %+v, want took %s", c.name, rs, c.took)
		}
	}
}
