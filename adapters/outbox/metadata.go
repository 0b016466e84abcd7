package outbox

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

// decodeMetadata parses a row's metadata: a JSON object of strings, as
// watermill-sql writes it. encoding/json took most of the relay's own CPU
// time per batch (see BENCHMARKS.md, "Relay: reading row metadata"), and
// these objects almost never hold an escape, so a scan reads them;
// anything else it leaves to encoding/json, which gives the same result.
func decodeMetadata(b []byte) (message.Metadata, error) {
	if md, ok := scanFlat(b); ok {
		return md, nil
	}
	var md message.Metadata
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, err
	}
	return md, nil
}

// scanFlat reads an object whose keys and values are strings without
// escapes; ok is false for anything else.
func scanFlat(b []byte) (md message.Metadata, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	md = make(message.Metadata, 8)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return md, skipSpace(b, i+1) == len(b)
	}
	for {
		k, j, ok := plainString(b, i)
		if !ok {
			return nil, false
		}
		if i = skipSpace(b, j); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return nil, false
		}
		md[k] = v
		if i = skipSpace(b, j); i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return md, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string starting at b[i] if it holds no escape
// and no control character, and returns it and the index after it.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !utf8.Valid(b[i+1 : j]) {
				return "", 0, false
			}
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
