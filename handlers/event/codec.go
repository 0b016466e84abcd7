package event

import (
	"bytes"
	"encoding/binary"
	"strings"
	"time"
	"unicode/utf8"
)

// The envelope is encoded on every event's write, inside its use case's
// transaction, and decoded on every delivery. encoding/json spent 6 to
// 10 µs on each with an 800-byte payload, most of it stepping through the
// payload byte by byte in its scanner's state machine. appendEnvelope and
// decodeEnvelope read the common envelope directly: plain strings, a
// compact payload. Whatever they do not read (an escape, a key that
// differs from a field's name but by case, a payload with spaces, a value
// of the wrong type) they leave to encoding/json, so the result, or the
// error, is encoding/json's in every case; fuzz tests hold the two
// equal. BENCHMARKS.md, "Envelope: encoded and decoded without
// encoding/json's scanner", has the figures.

// envelopeFields are the envelope's keys, which encoding/json matches in
// any case.
var envelopeFields = []string{"event_id", "event_name", "occurred_at", "correlation_id", "causation_id", "source", "aggregate_id", "payload"}

// appendEnvelope appends e's canonical JSON to dst as MarshalJSON writes
// it; ok is false when e holds something it leaves to encoding/json.
func appendEnvelope(dst []byte, e Event) (out []byte, ok bool) {
	at := e.OccurredAt.UTC()
	if y := at.Year(); y < 0 || y > 9999 { // encoding/json's error
		return dst, false
	}
	payload := []byte(e.Payload)
	if payload == nil {
		payload = []byte("null")
	} else if end, spaced := scanValue(payload, 0); end != len(payload) || spaced {
		return dst, false
	}
	for _, s := range []string{e.ID, e.Name, e.CorrelationID, e.CausationID, e.Source, e.AggregateID} {
		if !plainString(s) {
			return dst, false
		}
	}
	field := func(name, value string) {
		dst = append(dst, `"`...)
		dst = append(dst, name...)
		dst = append(dst, `":"`...)
		dst = append(dst, value...)
		dst = append(dst, `",`...)
	}
	dst = append(dst, '{')
	field("event_id", e.ID)
	field("event_name", e.Name)
	dst = append(dst, `"occurred_at":"`...)
	dst = at.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `",`...)
	for _, f := range [...]struct{ name, value string }{
		{"correlation_id", e.CorrelationID}, {"causation_id", e.CausationID},
		{"source", e.Source}, {"aggregate_id", e.AggregateID},
	} {
		if f.value != "" { // omitempty
			field(f.name, f.value)
		}
	}
	dst = append(dst, `"payload":`...)
	dst = append(dst, payload...)
	return append(dst, '}'), true
}

// plainString reports whether encoding/json writes s as it is between
// quotes: no quote, backslash or control character, valid UTF-8, and
// neither U+2028 nor U+2029, which it escapes.
func plainString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == '"' || c == '\\':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s) && !strings.ContainsAny(s, "\u2028\u2029")
}

// decodeEnvelope reads body, valid UTF-8, as json.Unmarshal into an Event
// would; ok is false when body holds something it leaves to
// encoding/json, which includes every body that is not valid JSON.
func decodeEnvelope(body []byte) (e Event, ok bool) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return e, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return e, skipSpace(body, i+1) == len(body)
	}
	for {
		k := i
		var plain bool
		if i, plain = scanString(body, i); i < 0 || !plain {
			return e, false
		}
		key := body[k+1 : i-1]
		if i = skipSpace(body, i); i == len(body) || body[i] != ':' {
			return e, false
		}
		v := skipSpace(body, i+1)
		if i, _ = scanValue(body, v); i < 0 {
			return e, false
		}
		value := body[v:i]
		var dst *string
		switch string(key) {
		case "event_id":
			dst = &e.ID
		case "event_name":
			dst = &e.Name
		case "correlation_id":
			dst = &e.CorrelationID
		case "causation_id":
			dst = &e.CausationID
		case "source":
			dst = &e.Source
		case "aggregate_id":
			dst = &e.AggregateID
		case "occurred_at":
			if value[0] != '"' || e.OccurredAt.UnmarshalJSON(value) != nil {
				return e, false
			}
		case "payload":
			e.Payload = bytes.Clone(value)
		default:
			for _, f := range envelopeFields {
				if bytes.EqualFold(key, []byte(f)) {
					return e, false
				}
			}
		}
		if dst != nil {
			if _, plain := scanString(value, 0); value[0] != '"' || !plain {
				return e, false
			}
			*dst = string(value[1 : len(value)-1])
		}
		if i = skipSpace(body, i); i == len(body) {
			return e, false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return e, skipSpace(body, i+1) == len(body)
		default:
			return e, false
		}
	}
}

// maxDepth is how deeply nested a value scanValue reads; it leaves
// deeper ones to encoding/json, whose own limit is 10,000.
const maxDepth = 1000

// scanValue reads the JSON value at b[i] (RFC 8259) and returns the index
// just past it, or -1 if there is none it reads; spaced says whether it
// had whitespace between its tokens.
func scanValue(b []byte, i int) (end int, spaced bool) {
	depth := 0
	// open holds, for each array or object not yet closed, its closer.
	var stack [32]byte
	open := stack[:0]
	for {
		// a value
		if i >= len(b) {
			return -1, spaced
		}
		switch c := b[i]; {
		case c == '"':
			i, _ = scanString(b, i)
		case c == '-' || c >= '0' && c <= '9':
			i = scanNumber(b, i)
		case c == 't':
			i = scanWord(b, i, "true")
		case c == 'f':
			i = scanWord(b, i, "false")
		case c == 'n':
			i = scanWord(b, i, "null")
		case c == '{' || c == '[':
			if depth++; depth > maxDepth {
				return -1, spaced
			}
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			open = append(open, closer)
			j := skipSpace(b, i+1)
			spaced = spaced || j > i+1
			if j < len(b) && b[j] == closer {
				open, depth, i = open[:len(open)-1], depth-1, j+1
				break
			}
			i = j
			if c == '{' {
				if i = scanKey(b, i, &spaced); i < 0 {
					return -1, spaced
				}
			}
			continue
		default:
			return -1, spaced
		}
		// after a value: the end, or what comes next in its container
		for {
			if i < 0 {
				return -1, spaced
			}
			if len(open) == 0 {
				return i, spaced
			}
			j := skipSpace(b, i)
			spaced = spaced || j > i
			if j == len(b) {
				return -1, spaced
			}
			closer := open[len(open)-1]
			if b[j] == closer {
				open, depth, i = open[:len(open)-1], depth-1, j+1
				continue
			}
			if b[j] != ',' {
				return -1, spaced
			}
			i = skipSpace(b, j+1)
			spaced = spaced || i > j+1
			if closer == '}' {
				i = scanKey(b, i, &spaced)
				if i < 0 {
					return -1, spaced
				}
			}
			break
		}
	}
}

// scanKey reads an object's key and its colon at b[i], and returns the
// index of its value.
func scanKey(b []byte, i int, spaced *bool) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i, _ = scanString(b, i); i < 0 {
		return -1
	}
	j := skipSpace(b, i)
	if j == len(b) || b[j] != ':' {
		return -1
	}
	k := skipSpace(b, j+1)
	*spaced = *spaced || j > i || k > j+1
	return k
}

// scanString reads the string at b[i], its opening quote, and returns the
// index past its closing one, or -1; plain says it holds no escape. As
// encoding/json's, it leaves the bytes past ASCII unchecked. It finds the
// quotes and backslashes with bytes.IndexByte and checks for control
// characters eight bytes at a time: a payload is mostly long strings.
func scanString(b []byte, i int) (end int, plain bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	plain = true
	for i++; ; {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1, false
		}
		run := b[i : i+q]
		if e := bytes.IndexByte(run, '\\'); e >= 0 {
			run = run[:e]
		}
		if hasControl(run) {
			return -1, false
		}
		if i += len(run); b[i] == '"' {
			return i + 1, plain
		}
		// an escape
		plain = false
		if i++; i == len(b) {
			return -1, false
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			if i+4 >= len(b) {
				return -1, false
			}
			for _, h := range b[i+1 : i+5] {
				if !isHex(h) {
					return -1, false
				}
			}
			i += 5
		default:
			return -1, false
		}
	}
}

// hasControl reports whether b holds a byte below 0x20.
func hasControl(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; len(b) >= 8; b = b[8:] {
		// a byte below 0x20 borrows into its high bit, which it did not
		// have set itself
		if x := binary.LittleEndian.Uint64(b); (x-0x20*ones)&^x&highs != 0 {
			return true
		}
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// scanNumber reads the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(b, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func scanWord(b []byte, i int, word string) int {
	if !bytes.HasPrefix(b[i:], []byte(word)) {
		return -1
	}
	return i + len(word)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
