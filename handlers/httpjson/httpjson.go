// Package httpjson holds the JSON request and response helpers every HTTP
// route uses, so all of them answer bad input the same way: a 4xx status
// and {"error": "<what was wrong>"}.
package httpjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Write answers with status and v as JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers with status and {"error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, map[string]string{"error": msg})
}

// Decode reads a command strictly into v: unknown fields (a misspelt key)
// and trailing data are errors. On failure it has already answered 400, or
// 413 when the body is over the server's limit, and returns false.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return decode(w, r, v, true)
}

// DecodeTolerant is Decode for documents whose producers may add fields,
// such as event envelopes: unknown fields are ignored.
func DecodeTolerant(w http.ResponseWriter, r *http.Request, v any) bool {
	return decode(w, r, v, false)
}

func decode(w http.ResponseWriter, r *http.Request, v any, strict bool) bool {
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("body holds more than one JSON value")
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than the limit of %d bytes", tooBig.Limit))
		return false
	}
	Error(w, http.StatusBadRequest, describe(err))
	return false
}

// describe turns a JSON decoding error into a message naming the field.
func describe(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &timeErr), strings.Contains(err.Error(), "Time.UnmarshalJSON"):
		return "a time field is not an RFC 3339 string like 2026-01-15T10:30:00Z: " + err.Error()
	case errors.As(err, &typeErr):
		return fmt.Sprintf("field %s must be %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("body is not valid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return "body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body is not valid JSON: it ends before the value does"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "body: " + err.Error()
	}
}
