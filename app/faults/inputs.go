package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/faultprobe"

	"github.com/moenda/moenda/app/harness"
)

// request is a hostile request to the API and the status it must get.
type request struct {
	name   string
	body   []byte
	status int
}

// raw is a hostile message published straight to the probe's exchange,
// and the reason its dead letter must give ("" when it must be
// acknowledged without one).
type raw struct {
	name   string
	key    string // routing key; the probe's event when empty
	id     string // message id; none when empty
	body   []byte
	reason string
}

// hostile sends the requests to the first node, each answered with its
// status within within, and publishes the messages; each message that must
// be dead-lettered is recorded as a poison event, so the checker finds it
// in the dead-letter queue with its reason.
//
// deadWithin, when not zero, bounds the time from each message's confirm
// to its dead letter's last failure.
func (r *run) hostile(ctx context.Context, within, deadWithin time.Duration, reqs []request, msgs []raw) error {
	if err := r.Start(ctx, 1); err != nil {
		return err
	}
	if r.declares(clauseResources) {
		r.baseline()
	}
	nd := r.Nodes[0]
	client := http.Client{Timeout: 10 * time.Second}
	for _, q := range reqs {
		at := time.Now()
		resp, err := client.Post("http://"+nd.Addr+"/v1/events", "application/json", bytes.NewReader(q.body))
		if err != nil {
			r.judge(clauseAPI, false, "API, %s: %v", q.name, err)
			continue
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		_ = resp.Body.Close()
		took := time.Since(at)
		r.result.addExtra("api_answer_seconds_max", took.Seconds())
		ok := resp.StatusCode == q.status && took <= within
		r.judge(clauseAPI, ok, "API, %s: %d in %s%s", q.name, resp.StatusCode, took.Round(time.Millisecond),
			map[bool]string{true: "", false: fmt.Sprintf(" (%s); want %d within %s", strings.TrimSpace(string(msg)), q.status, within)}[ok])
	}
	ch, closeCh, err := r.channel()
	if err != nil {
		return err
	}
	defer closeCh()
	reasons := map[string]string{}
	confirmed := map[string]time.Time{}
	for i, m := range msgs {
		key := m.key
		if key == "" {
			key = faultprobe.Event
		}
		id := m.id
		if id == "" {
			id = harness.BodyKey(m.body)
		}
		op := harness.Op{Outcome: harness.Invoked, Seq: i, EventID: id, Kind: harness.Poison, At: time.Now()}
		if m.reason != "" {
			reasons[id] = m.reason
			if err := r.History.Add(harness.Line{Op: op}); err != nil {
				return err
			}
		}
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, faultprobe.Exchange, key, true, false,
			amqp091.Publishing{MessageId: m.id, Body: m.body, ContentType: "application/json", DeliveryMode: amqp091.Persistent})
		if err != nil {
			return err
		}
		if ok, err := conf.WaitContext(ctx); err != nil || !ok {
			return errOr(err, "the broker refused "+m.name)
		}
		confirmed[id] = time.Now()
		if m.reason != "" {
			op.Outcome, op.At = harness.OK, time.Now()
			if err := r.History.Add(harness.Line{Op: op}); err != nil {
				return err
			}
		}
	}
	if err := r.wait(ctx, 2*time.Second); err != nil {
		return err
	}
	if !nd.Running() {
		r.problem("the node exited on hostile input; its log: %s", nd.Log)
	}
	if r.declares(clauseRunning) {
		r.judge(clauseRunning, nd.Running(), "the node still runs after the hostile input: %v", nd.Running())
	}
	r.after = append(r.after, func(_ []harness.Op, seen harness.Observed) {
		found := map[string]bool{}
		slowest := time.Duration(0)
		for _, d := range seen.DeadLetters {
			want, ok := reasons[d.EventID]
			if !ok {
				continue
			}
			found[d.EventID] = true
			if d.Reason != want || d.Attempts != "1" {
				r.judge(clauseBroker, false, "dead letter %s: reason %q after %s attempts; want %q after 1", d.EventID, d.Reason, d.Attempts, want)
			}
			if deadWithin > 0 {
				last, err := time.Parse(time.RFC3339Nano, d.LastFailure)
				took := last.Sub(confirmed[d.EventID])
				slowest = max(slowest, took)
				if err != nil || took > deadWithin {
					r.judge(clauseBroker, false, "dead letter %s: dead-lettered %s after its publish (%q); within %s expected", d.EventID, took.Round(time.Millisecond), d.LastFailure, deadWithin)
				}
			}
		}
		detail := fmt.Sprintf("%d of %d messages dead-lettered on their first attempt with their reason", len(found), len(reasons))
		if deadWithin > 0 {
			detail += fmt.Sprintf(", the slowest %s after its publish", slowest.Round(time.Millisecond))
		}
		r.judge(clauseBroker, len(found) == len(reasons), "%s", detail)
	})
	return nil
}

// envelope is a moenda envelope of the probe's event with payload, as
// raw JSON text.
func envelope(id, name, payload string) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"event_name":%q,"occurred_at":"2026-11-30T00:00:00Z","source":"faults","payload":%s}`, id, name, payload))
}

func deep(n int) []byte {
	return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
}

func malformedJSON(ctx context.Context, r *run) error {
	// Bytes that are not UTF-8 are refused as such before any parse.
	bad := []struct {
		name   string
		body   []byte
		reason string
	}{
		{"a lone brace", []byte(`{`), event.ReasonDecode},
		{"a truncated body", envelope(harness.EventID(r.DBName, 9, 0), faultprobe.Event, `{"writer":9}`)[:40], event.ReasonDecode},
		{"binary garbage", []byte{0x00, 0x9f, 0xff, 0x01, 0xc3, 0x28}, event.ReasonInvalidEncoding},
		{"an array", []byte(`[{"event_name":"` + faultprobe.Event + `"}]`), event.ReasonDecode},
		{"10,000-deep nesting", deep(10000), event.ReasonDecode},
	}
	r.injected("each of %d malformed bodies (a lone brace, truncated, binary, an array, 10,000-deep nesting) posted to the API and published to the exchange", len(bad))
	var reqs []request
	var msgs []raw
	for i, b := range bad {
		reqs = append(reqs, request{b.name, b.body, http.StatusBadRequest})
		msgs = append(msgs, raw{name: b.name, id: harness.EventID(r.DBName, 19, i), body: b.body, reason: b.reason})
	}
	return r.hostile(ctx, 100*time.Millisecond, time.Second, reqs, msgs)
}

func invalidEncoding(ctx context.Context, r *run) error {
	r.injected("a payload string with the bytes FF FE, and one with \\u0000 that the handler stores, posted to the API and published to the exchange")
	ff := func(id string) []byte { return envelope(id, faultprobe.Event, "{\"writer\":20,\"note\":\"\xff\xfe\"}") }
	nul := func(id string) []byte { return envelope(id, faultprobe.Event, `{"writer":20,"note":"a\u0000b"}`) }
	id := func(i int) string { return harness.EventID(r.DBName, 20, i) }
	return r.hostile(ctx, 100*time.Millisecond, 0,
		[]request{{"invalid UTF-8", ff(id(0)), http.StatusBadRequest}, {"a NUL character", nul(id(1)), http.StatusBadRequest}},
		[]raw{{name: "invalid UTF-8", id: id(2), body: ff(id(2)), reason: event.ReasonInvalidEncoding},
			{name: "a NUL character, which PostgreSQL refuses to store", id: id(3), body: nul(id(3)), reason: event.ReasonInvalidData}})
}

func unknownType(ctx context.Context, r *run) error {
	r.injected("an event of version 99 and one of an unknown type, posted to the API and published to the exchange")
	id := func(i int) string { return harness.EventID(r.DBName, 21, i) }
	v99, unknown := faultprobe.Name+".event.v99", faultprobe.Name+".unknown.v1"
	err := r.hostile(ctx, 100*time.Millisecond, 0,
		[]request{{"an unknown type", envelope(id(0), "x.unknown", `{}`), http.StatusBadRequest}},
		[]raw{{name: "version 99", id: id(1), key: v99, body: envelope(id(1), v99, `{"writer":21}`), reason: event.ReasonUnknownVersion},
			{name: "an unknown type", id: id(2), key: unknown, body: envelope(id(2), unknown, `{"writer":21}`)}})
	r.after = append(r.after, func(_ []harness.Op, seen harness.Observed) {
		for _, d := range seen.DeadLetters {
			if d.EventID == id(2) {
				r.judge(clauseBroker, false, "the event of an unknown type was dead-lettered (%s); the queue's policy acknowledges and counts it", d.Reason)
			}
		}
		r.judge(clauseBroker, r.Counted(harness.Ignored) == 1, "moenda_messages_ignored_total counted %d events of an unknown type; 1 was sent", r.Counted(harness.Ignored))
	})
	return err
}

func badEventIDs(ctx context.Context, r *run) error {
	r.injected("three messages with neither a message id nor an event_id; API requests with a 37-character and a non-UUID event_id")
	var msgs []raw
	for i := range 3 {
		msgs = append(msgs, raw{name: fmt.Sprintf("no id %d", i), body: []byte(fmt.Sprintf(`{"event_name":%q,"occurred_at":"2026-11-30T00:00:00Z","payload":{"writer":22,"seq":%d}}`, faultprobe.Event, i)),
			reason: event.ReasonMissingEventID})
	}
	long := strings.Repeat("a", 37)
	return r.hostile(ctx, 100*time.Millisecond, 0,
		[]request{{"a 37-character event_id", envelope(long, faultprobe.Event, `{}`), http.StatusBadRequest},
			{"a non-UUID event_id", envelope("not-a-uuid", faultprobe.Event, `{}`), http.StatusBadRequest}},
		msgs)
}

func oversized(ctx context.Context, r *run) error {
	r.injected("a 10 MB event posted to the API (limit 1 MiB), and one published straight to the exchange")
	big := envelope(harness.EventID(r.DBName, 24, 0), faultprobe.Event, `{"writer":24,"filler":"`+strings.Repeat("x", 10<<20)+`"}`)
	id := harness.EventID(r.DBName, 24, 1)
	return r.hostile(ctx, time.Second, 0,
		[]request{{"10 MB", big, http.StatusRequestEntityTooLarge}},
		[]raw{{name: "10 MB", id: id, body: envelope(id, faultprobe.Event, `{"writer":24,"filler":"`+strings.Repeat("x", 10<<20)+`"}`), reason: "too_large"}})
}
