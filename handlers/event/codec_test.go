package event

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func FuzzEnvelopeEncoding(f *testing.F) {
	f.Add("550e8400-e29b-41d4-a716-446655440000", "tarefa.concluida.v1", "req-1", "", "tarefas", "7", int64(1768473000123456789), []byte(`{"tarefa_id":1}`), false)
	f.Add("id", "a.v1", "c\"q", "c\\d", "é", "\u2028", int64(0), []byte(` {"a": 1} `), false)
	f.Add("", "", "\x7f", "\xff", "<&>", "", int64(-62135596800000000), []byte(`[1,-2.5e+3,"x\u00e9\n",true,false,null,{}]`), false)
	f.Add("", "", "", "", "", "", int64(1<<62), []byte(nil), true)
	f.Add("", "", "", "", "", "", int64(5), []byte(`{"a":01}`), false)
	f.Add("", "", "", "", "", "", int64(5), []byte(``), false)
	f.Fuzz(func(t *testing.T, id, name, corr, caus, source, agg string, nanos int64, payload []byte, nilPayload bool) {
		if nilPayload {
			payload = nil
		}
		e := Event{ID: id, Name: name, OccurredAt: time.Unix(0, nanos).In(time.FixedZone("X", -3*3600)),
			CorrelationID: corr, CausationID: caus, Source: source, AggregateID: agg, Payload: payload}
		want, wantErr := marshalEnvelope(e)
		got, err := e.MarshalJSON()
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("MarshalJSON = %s, %v\nencoding/json: %s, %v", got, err, want, wantErr)
		}
	})
}

func FuzzEnvelopeDecoding(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"550e8400-e29b-41d4-a716-446655440000","event_name":"a.b.v1","occurred_at":"2026-01-15T10:30:00.5-03:00","payload":{"x":[1,2]},"extra":{"y":null}}`,
		` { "event_id" : "a" , "payload" : [ 1 , { "b" : "c" } ] } `,
		`{"EVENT_ID":"a","event_id":"b"}`, `{"ſource":"a"}`, `{"source":"a\nb"}`, `{"source":"a\u0041"}`,
		`{"source":null}`, `{"source":1}`, `{"occurred_at":"2026-13-01T00:00:00Z"}`, `{"occurred_at":null}`,
		`{"payload":null}`, `{"payload":1,"payload":"two"}`, `{}`, `[]`, `null`, `{"a":1,}`, `{"a":"\u12"}`,
		`{"a":-01}`, `{"a":1.}`, `{"a":1e}`, `{"a":tru}`, `{"a":"b"} x`, `{"a":[[[[]]]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return // Decode refuses it first
		}
		var want Event
		wantErr := json.Unmarshal(body, &want)
		got, ok := decodeEnvelope(body)
		if !ok {
			return // encoding/json decodes it
		}
		if wantErr != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %q as %+v\nencoding/json: %+v, %v", body, got, want, wantErr)
		}
	})
}

// scanValue must read every valid value it is given, with no space
// around it, and only those, saying whether it has space inside.
func FuzzScanValue(f *testing.F) {
	for _, s := range []string{`0`, `-0.1e-7`, `"\ud83d\ude00"`, `{"a":[true,false,null]}`, `[ ]`, `{ }`, `[1 ,2]`, `{"a" :1}`, `01`, `"\x"`, `[`, `{"a"}`, `[1,]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		end, spaced := scanValue(b, 0)
		valid := json.Valid(b)
		if end == len(b) {
			var compact bytes.Buffer
			if !valid || json.Compact(&compact, b) != nil || spaced != !bytes.Equal(compact.Bytes(), b) {
				t.Fatalf("scanValue(%q) = %d, spaced %v; json.Valid %v, compact %q", b, end, spaced, valid, compact.Bytes())
			}
			return
		}
		if valid && skipSpace(b, 0) == 0 && len(b) < maxDepth && !strings.ContainsAny(string(b[len(b)-1:]), " \t\r\n") {
			t.Fatalf("scanValue(%q) = %d: it left a valid value to encoding/json", b, end)
		}
	})
}

// The events moenda writes take the direct way both ways: a fuzz test
// holding the two equal would pass as well if neither ever did.
func TestEnvelopeCodecReadsTheCommonEnvelope(t *testing.T) {
	e, err := NewFor("tarefa.concluida.v1", "tarefas", "7", time.Now(), map[string]any{"titulo": "Ação <b>", "n": 1.5, "tags": []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	e.CorrelationID, e.CausationID = "req-1", "cause-1"
	body, ok := appendEnvelope(nil, e)
	if !ok {
		t.Fatalf("appendEnvelope left %+v to encoding/json", e)
	}
	back, ok := decodeEnvelope(body)
	if !ok {
		t.Fatalf("decodeEnvelope left %s to encoding/json", body)
	}
	if !back.OccurredAt.Equal(e.OccurredAt) || back.ID != e.ID || back.AggregateID != "7" || back.CausationID != "cause-1" || !bytes.Equal(back.Payload, e.Payload) {
		t.Fatalf("round trip: %+v\nfrom %+v", back, e)
	}
	spaced := e
	spaced.Payload = json.RawMessage(`{ "a" : 1 }`)
	if _, ok := appendEnvelope(nil, spaced); ok {
		t.Fatal("a payload with spaces must be compacted by encoding/json")
	}
	if got, err := spaced.MarshalJSON(); err != nil || !bytes.HasSuffix(got, []byte(`"payload":{"a":1}}`)) {
		t.Fatalf("MarshalJSON = %s, %v", got, err)
	}
}

// BenchmarkDecode is the envelope's decoding, which every delivery pays
// before its handler runs.
func BenchmarkDecode(b *testing.B) {
	e, err := New("bench.evento.v1", "bench", map[string]string{"data": strings.Repeat("x", 800)})
	if err != nil {
		b.Fatal(err)
	}
	msg, err := ToMessage(e)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Decode(msg.Payload); err != nil {
			b.Fatal(err)
		}
	}
}
