package handlers

import (
	"errors"
	"unicode/utf8"
)

// The kinds of error a use case returns. A plugin names its own errors, in
// its own words, with NewError; the HTTP layer (httpjson.Fail) answers each
// kind with its status in one place, so no plugin maps errors to HTTP.
var (
	// ErrInvalid: the request names a bad field or parameter (400).
	ErrInvalid = errors.New("invalid input")
	// ErrNotFound: what the request names does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request is at odds with the current state (409).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable wraps a failure to reach a service the unit of work
	// needs (the database restarting, a connection cut): retrying later may
	// succeed. HTTP routes answer it with 503 and Retry-After.
	ErrUnavailable = errors.New("service unavailable")
)

// NewError returns an error that reads msg and is of kind (one of the
// kinds above): errors.Is finds both the error itself and its kind, and
// wrapping it with %w adds detail without changing either.
func NewError(kind error, msg string) error { return &kindError{kind: kind, msg: msg} }

type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Cut shortens s to at most n bytes on a character boundary, marking the
// cut: for quoting what a client sent in an error message.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
