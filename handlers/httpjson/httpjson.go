// Package httpjson holds the JSON request and response helpers every HTTP
// route uses, so all of them answer bad input the same way: a 4xx status
// and {"error": "<what was wrong>"}.
package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/moenda/moenda/handlers"
	"github.com/moenda/moenda/handlers/event"
	"github.com/moenda/moenda/handlers/schema"
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

// RetryAfter is the wait, in seconds, a 503 asks for: long enough for a
// pool to reconnect, short enough that a restart is ridden out by retries.
const RetryAfter = 1

// ServerError answers a failure of the unit of work. An event too large
// for the outbox (event.TooLargeError) is the client's: it answers 413,
// saying the limit and the setting. A service the request needs being
// away (handlers.ErrUnavailable: the database restarting, a cut
// connection) answers 503 with Retry-After, so clients and proxies retry
// rather than report a fault; anything else answers 500. Beyond the
// event's size, err goes to the log only: the client gets no internals.
func ServerError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	attrs := []any{"method", r.Method, "path", r.URL.Path, "correlation_id", event.CorrelationID(r.Context()), "error", err}
	var tooLarge *event.TooLargeError
	if errors.As(err, &tooLarge) {
		logger.WarnContext(r.Context(), "request refused: the event it writes is too large", attrs...)
		Error(w, http.StatusRequestEntityTooLarge, tooLarge.Error())
		return
	}
	if errors.Is(err, handlers.ErrUnavailable) {
		logger.WarnContext(r.Context(), "request failed: a service it needs is unavailable", attrs...)
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		Error(w, http.StatusServiceUnavailable, fmt.Sprintf("a service this request needs is unavailable; retry in %d s", RetryAfter))
		return
	}
	logger.ErrorContext(r.Context(), "request failed", attrs...)
	Error(w, http.StatusInternalServerError, "internal error; see the server log")
}

// Fail answers a use case's error by its kind, with the error's own
// message: handlers.ErrInvalid 400, handlers.ErrNotFound 404,
// handlers.ErrConflict 409; anything else as ServerError does.
func Fail(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	switch {
	case errors.Is(err, handlers.ErrInvalid):
		Error(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, handlers.ErrNotFound):
		Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, handlers.ErrConflict):
		Error(w, http.StatusConflict, err.Error())
	default:
		ServerError(w, r, logger, err)
	}
}

// Respond answers what a use case returned: err as Fail does, or v with
// status when err is nil.
func Respond(w http.ResponseWriter, r *http.Request, logger *slog.Logger, status int, v any, err error) {
	if err != nil {
		Fail(w, r, logger, err)
		return
	}
	Write(w, status, v)
}

// The route helpers below answer a route that only hands its input to a
// use case: each reads the input (answering bad input as Decode or Fail
// does), runs use, and answers its result with status, or its error as
// Fail does. A route that does more than that writes its handler itself.

// Run answers a route whose use case needs nothing from the request.
func Run[Out any](logger *slog.Logger, status int, use func(context.Context) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := use(r.Context())
		Respond(w, r, logger, status, out, err)
	}
}

// Command answers a route whose input is the JSON body, decoded into an
// In as Decode does.
func Command[In, Out any](logger *slog.Logger, status int, use func(context.Context, In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if !Decode(w, r, &in) {
			return
		}
		out, err := use(r.Context(), in)
		Respond(w, r, logger, status, out, err)
	}
}

// Param answers a route whose input read parses from the request (a path
// parameter, the query string); read's error is answered as Fail does.
func Param[In, Out any](logger *slog.Logger, status int, read func(*http.Request) (In, error), use func(context.Context, In) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		in, err := read(r)
		if err != nil {
			Fail(w, r, logger, err)
			return
		}
		out, err := use(r.Context(), in)
		Respond(w, r, logger, status, out, err)
	}
}

// ParamCommand answers a route that sends a command, the JSON body, to
// what read parses from the request (the resource the path names).
func ParamCommand[In, Cmd, Out any](logger *slog.Logger, status int, read func(*http.Request) (In, error), use func(context.Context, In, Cmd) (Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		in, err := read(r)
		if err != nil {
			Fail(w, r, logger, err)
			return
		}
		var cmd Cmd
		if !Decode(w, r, &cmd) {
			return
		}
		out, err := use(r.Context(), in, cmd)
		Respond(w, r, logger, status, out, err)
	}
}

// PathID reads a positive integer id from the path parameter param, for
// Param and ParamCommand; anything else is answered with invalid, the
// plugin's own words (an error of kind handlers.ErrInvalid).
func PathID(param string, invalid error) func(*http.Request) (int64, error) {
	return func(r *http.Request) (int64, error) {
		id, err := strconv.ParseInt(chi.URLParam(r, param), 10, 64)
		if err != nil || id <= 0 {
			return 0, invalid
		}
		return id, nil
	}
}

// Query reads r's query string as strictly as Decode reads a body: a
// parameter not in accepted (a misspelt name) or one given twice is an
// error of kind handlers.ErrInvalid, answered 400 by Fail. It returns each
// parameter given, by name; the route judges the values in its own words.
func Query(r *http.Request, accepted ...string) (map[string]string, error) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, handlers.NewError(handlers.ErrInvalid, "the query string is malformed: "+err.Error())
	}
	out := make(map[string]string, len(values))
	for _, name := range slices.Sorted(maps.Keys(values)) {
		switch {
		case !slices.Contains(accepted, name):
			return nil, handlers.NewError(handlers.ErrInvalid, fmt.Sprintf("unknown parameter %s (accepted: %s)", strconv.Quote(handlers.Cut(name, 64)), strings.Join(accepted, ", ")))
		case len(values[name]) > 1:
			return nil, handlers.NewError(handlers.ErrInvalid, fmt.Sprintf("parameter %s is given more than once", name))
		}
		out[name] = values[name][0]
	}
	return out, nil
}

// Decode reads a command strictly into v: unknown fields (a misspelt key)
// and trailing data are errors, and so is text that is not UTF-8 or holds
// a NUL (see checkText). On failure it has already answered 400, or 413
// when the body is over the server's limit, and returns false.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	return decode(w, r, v, true)
}

// DecodeTolerant is Decode for documents whose producers may add fields,
// such as event envelopes: unknown fields are ignored.
func DecodeTolerant(w http.ResponseWriter, r *http.Request, v any) bool {
	return decode(w, r, v, false)
}

func decode(w http.ResponseWriter, r *http.Request, v any, strict bool) bool {
	body, err := io.ReadAll(r.Body)
	var keys []string
	if err == nil {
		keys, err = checkText(body)
	}
	if err == nil {
		err = unmarshal(body, v, strict)
	}
	if err == nil && strict {
		err = exactNames(keys, v)
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

// unmarshal decodes the one JSON value body holds into v.
func unmarshal(body []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(bytes.Trim(body[dec.InputOffset():], " \t\r\n")) > 0 {
		return errTrailing
	}
	return nil
}

// exactNames refuses a top-level field name that matches one of v's fields
// only when case is ignored, as encoding/json matches them: USUARIO_ID is
// a misspelling, not usuario_id.
func exactNames(keys []string, v any) error {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	names := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	for _, k := range keys {
		if names[k] {
			continue
		}
		for name := range names {
			if strings.EqualFold(k, name) {
				return &textError{path: "body", name: true, problem: fmt.Sprintf("%q matches %q only when case is ignored; field names are case-sensitive", k, name)}
			}
		}
	}
	return nil
}

// errTrailing is a body with more after its JSON value.
var errTrailing = errors.New("body holds more than one JSON value")

// maxDepth bounds how deep a body may nest objects and arrays: far beyond
// any command or payload, and far below what a recursive reader of the
// stored event (a handler, PostgreSQL) may refuse.
const maxDepth = 100

// textError is a JSON string that cannot be stored as text.
type textError struct {
	path    string // the field holding it, or whose field name it is
	name    bool   // a field name, not a value
	problem string
}

func (e *textError) Error() string {
	if e.name {
		return fmt.Sprintf("a field name in %s %s", e.path, e.problem)
	}
	if e.path == "body" {
		return "body " + e.problem
	}
	return fmt.Sprintf("field %s %s", e.path, e.problem)
}

// depthError is a body nested deeper than maxDepth.
type depthError struct{}

func (depthError) Error() string {
	return fmt.Sprintf("body nests objects and arrays more than %d deep", maxDepth)
}

// frame is one open object or array while checkText walks a body.
type frame struct {
	array   bool
	index   int    // the element being read, in an array
	key     string // the field being read, in an object
	wantKey bool   // in an object, the next string is a field name
	keys    map[string]bool
}

// checkText checks that every string of body, field names included, is
// UTF-8 and holds no NUL, that no object names a field twice (parsers
// disagree on which one wins: jsonb and encoding/json keep the last, others
// the first), and that nesting stays within maxDepth; it returns the
// top-level object's field names. It reads
// the raw bytes: encoding/json turns invalid UTF-8 and unpaired surrogate
// escapes into U+FFFD without a word, and PostgreSQL refuses NUL in text.
// It walks tokens, without recursion, and leaves syntax errors to the
// decoder, which reports them with their offset.
func checkText(body []byte) (topKeys []string, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // any number is a token: ranges are the decoder's business
	var stack []frame
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return topKeys, nil
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '{' || tok == '[' {
				if len(stack) == maxDepth {
					return nil, depthError{}
				}
				stack = append(stack, frame{array: tok == '[', wantKey: tok == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
		case string:
			if problem := stringProblem(rawString(body, start, dec.InputOffset())); problem != "" {
				top := len(stack) - 1
				if top >= 0 && stack[top].wantKey {
					return nil, &textError{path: path(stack[:top]), name: true, problem: problem}
				}
				return nil, &textError{path: path(stack), problem: problem}
			}
			if top := len(stack) - 1; top >= 0 && stack[top].wantKey {
				f := &stack[top]
				if f.keys[tok] {
					return nil, &textError{path: path(stack[:top]), name: true, problem: fmt.Sprintf("%q appears twice; send each field once", tok)}
				}
				if f.keys == nil {
					f.keys = map[string]bool{}
				}
				f.keys[tok], f.key, f.wantKey = true, tok, false
				if top == 0 {
					topKeys = append(topKeys, tok)
				}
				continue
			}
		}
		// A value has ended: move its container to the next one.
		if len(stack) == 0 {
			return topKeys, nil
		}
		top := &stack[len(stack)-1]
		if top.array {
			top.index++
		} else {
			top.wantKey = true
		}
	}
}

// rawString returns the bytes between the quotes of the string token that
// spans body[start:end], where start may precede it by blanks, ',' or ':'.
func rawString(body []byte, start, end int64) []byte {
	s := body[start:end]
	open := bytes.IndexByte(s, '"')
	if open < 0 || len(s) < open+2 {
		return nil
	}
	return s[open+1 : len(s)-1]
}

// stringProblem says what keeps raw, a JSON string as sent without its
// quotes, from being stored as text, or returns "".
func stringProblem(raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == 0:
			return `contains a NUL character (\u0000)`
		case raw[i] != '\\':
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		i += 4
		switch {
		case r == 0:
			return `contains a NUL character (\u0000)`
		case r >= 0xD800 && r < 0xDC00: // must be followed by a low surrogate
			if len(raw) > i+2 && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(raw[i+3:]); lo >= 0xDC00 && lo < 0xE000 {
					i += 6
					continue
				}
			}
			return fmt.Sprintf(`is not valid UTF-8: \u%04x is half of a surrogate pair`, r)
		case r >= 0xDC00 && r < 0xE000:
			return fmt.Sprintf(`is not valid UTF-8: \u%04x is half of a surrogate pair`, r)
		}
	}
	return ""
}

// hex4 decodes the four hex digits b starts with, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(n)
}

// path names the value being read in stack the way messages name fields:
// payload.titulo, items[2].name; the body itself is "body".
func path(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		switch {
		case f.array:
			fmt.Fprintf(&b, "[%d]", f.index)
		case schema.PlainKey(f.key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		default:
			fmt.Fprintf(&b, "[%s]", strconv.Quote(handlers.Cut(f.key, 64)))
		}
	}
	switch p := b.String(); {
	case p == "":
		return "body"
	case p[0] == '[':
		return "body" + p
	default:
		return p
	}
}

// describe turns a JSON decoding error into a message naming the field in
// JSON's terms, not Go's.
func describe(err error) string {
	var textErr *textError
	var depthErr depthError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &textErr), errors.As(err, &depthErr), errors.Is(err, errTrailing):
		return err.Error()
	case errors.As(err, &timeErr):
		return fmt.Sprintf("a time field is not an RFC 3339 string like 2026-01-15T10:30:00Z: got %q", handlers.Cut(timeErr.Value, 64))
	case strings.Contains(err.Error(), "Time.UnmarshalJSON"):
		return "a time field is not an RFC 3339 string like 2026-01-15T10:30:00Z"
	case errors.As(err, &typeErr):
		field := "body"
		if typeErr.Field != "" {
			field = "field " + typeErr.Field
		}
		if got, ok := strings.CutPrefix(typeErr.Value, "number "); ok { // a number the type cannot hold
			return fmt.Sprintf("%s must be %s, got %s", field, numberRange(typeErr.Type), handlers.Cut(got, 32))
		}
		return fmt.Sprintf("%s must be %s, got %s", field, jsonType(typeErr.Type), jsonValue(typeErr.Value))
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("body is not valid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return "body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body is not valid JSON: it ends before the value does"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return "unknown field " + strconv.Quote(handlers.Cut(name, 64))
	default:
		return "body: " + strings.TrimPrefix(err.Error(), "json: ")
	}
}

var timeType = reflect.TypeFor[time.Time]()

// jsonType names what JSON value a Go type takes.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return "an RFC 3339 time string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "a JSON array"
	case reflect.Array:
		return "a JSON array"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	default:
		return "another JSON value"
	}
}

// numberRange says which numbers a numeric Go type holds.
func numberRange(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", int64(-1)<<(bits-1), int64(math.MaxInt64>>(64-bits)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64>>(64-t.Bits())))
	case reflect.Float32:
		return fmt.Sprintf("a number of magnitude at most %g", math.MaxFloat32)
	case reflect.Float64:
		return fmt.Sprintf("a number of magnitude at most %g", math.MaxFloat64)
	default:
		return jsonType(t)
	}
}

// jsonValue names the kind of JSON value encoding/json reports it got.
func jsonValue(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "true or false"
	case "array":
		return "an array"
	case "object":
		return "an object"
	default:
		return v
	}
}
