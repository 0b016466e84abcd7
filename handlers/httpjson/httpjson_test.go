package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moenda/moenda/handlers"
)

func TestCheckText(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // "" when the body passes
	}{
		{"plain text", `{"titulo":"Escrever relatório","n":1,"ok":true,"x":null}`, ""},
		{"invalid UTF-8 in a nested value", "{\"payload\":{\"titulo\":\"a\xffb\"}}", "field payload.titulo is not valid UTF-8"},
		{"NUL escape", `{"titulo":"a\u0000b"}`, `field titulo contains a NUL character`},
		{"NUL in an array element's field", `{"items":[{"name":"x"},{"name":"y"},{"name":"\u0000"}]}`, "field items[2].name contains a NUL character"},
		{"invalid UTF-8 in a field name", "{\"payload\":{\"a\xff\":1}}", "a field name in payload is not valid UTF-8"},
		{"NUL in a field name at the root", `{"a\u0000":1}`, "a field name in body contains a NUL character"},
		{"the body is a string", `"\u0000"`, "body contains a NUL character"},
		{"an element of a root array", "[\"ok\",\"\xff\"]", "field body[1] is not valid UTF-8"},
		{"nested arrays", `[[1,[2,"\u0000"]]]`, "field body[0][1][1] contains a NUL character"},
		{"a field name that is not a word", `{"a.b":{"c":"\u0000"}}`, `field body["a.b"].c contains a NUL character`},
		{"lone high surrogate", `{"t":"\ud800"}`, `field t is not valid UTF-8: \ud800 is half of a surrogate pair`},
		{"high surrogate before another escape", `{"t":"\ud800\u0041"}`, `\ud800 is half of a surrogate pair`},
		{"lone low surrogate", `{"t":"x\uDC00"}`, `\udc00 is half of a surrogate pair`},
		{"surrogate pair", `{"t":"\ud83d\ude00"}`, ""},
		{"an escaped backslash, then u0000 as text", `{"t":"\\u0000"}`, ""},
		{"an escaped backslash, then a NUL escape", `{"t":"\\\u0000"}`, "field t contains a NUL character"},
		{"other escapes", `{"t":"\"\\\/\b\f\n\r\t\u00e9"}`, ""},
		{"numbers out of any range are the decoder's business", `{"n":1e400}`, ""},
		{"a syntax error is the decoder's business", `{"a" 1}`, ""},
		{"only the first value is read", `{} "\u0000"`, ""},
		{"a field twice", `{"a":1,"b":2,"a":3}`, `a field name in body "a" appears twice`},
		{"a field twice, nested", `{"x":{"b":1,"b":2}}`, `a field name in x "b" appears twice`},
		{"one name in two objects", `[{"a":1},{"a":2}]`, ""},
		{"100 levels", strings.Repeat("[", 100) + strings.Repeat("]", 100), ""},
		{"101 levels", strings.Repeat("[", 101) + strings.Repeat("]", 101), "more than 100 deep"},
		{"10,000 arrays", strings.Repeat("[", 10000) + strings.Repeat("]", 10000), "more than 100 deep"},
		{"10,000 objects", strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), "more than 100 deep"},
		{"10,000 unclosed", strings.Repeat("[", 10000), "more than 100 deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkText([]byte(tt.body))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("checkText = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("checkText = %v, want %q", err, tt.want)
			}
		})
	}
}

type command struct {
	UsuarioID int64     `json:"usuario_id"`
	Titulo    string    `json:"titulo"`
	Small     uint8     `json:"small"`
	At        time.Time `json:"at"`
	Items     []struct {
		Name string `json:"name"`
	} `json:"items"`
}

func TestDecodeDescribesInJSONTerms(t *testing.T) {
	tests := []struct {
		name   string
		strict bool
		body   string
		code   int
		want   string
	}{
		{"valid", true, `{"usuario_id":1,"titulo":"x","items":[{"name":"a"}]}`, http.StatusOK, ""},
		{"an array body", true, `[1,2]`, http.StatusBadRequest, "body must be a JSON object, got an array"},
		{"a string body", true, `"x"`, http.StatusBadRequest, "body must be a JSON object, got a string"},
		{"a string for a number", true, `{"usuario_id":"1"}`, http.StatusBadRequest, "field usuario_id must be a number, got a string"},
		{"a number for a string", true, `{"titulo":7}`, http.StatusBadRequest, "field titulo must be a string, got a number"},
		{"an object for a string", true, `{"titulo":{}}`, http.StatusBadRequest, "field titulo must be a string, got an object"},
		{"a boolean for a number", true, `{"usuario_id":true}`, http.StatusBadRequest, "field usuario_id must be a number, got true or false"},
		{"a fraction for an integer", true, `{"usuario_id":1.5}`, http.StatusBadRequest, "field usuario_id must be a whole number from -9223372036854775808 to 9223372036854775807, got 1.5"},
		{"out of range", true, `{"small":300}`, http.StatusBadRequest, "field small must be a whole number from 0 to 255, got 300"},
		{"a string for an array", true, `{"items":"x"}`, http.StatusBadRequest, "field items must be a JSON array, got a string"},
		{"a number for an element", true, `{"items":[5]}`, http.StatusBadRequest, "must be a JSON object, got a number"},
		{"a date without a time", true, `{"at":"2026-01-15"}`, http.StatusBadRequest, `not an RFC 3339 string like 2026-01-15T10:30:00Z: got "2026-01-15"`},
		{"a time as a number", true, `{"at":5}`, http.StatusBadRequest, "not an RFC 3339 string"},
		{"an unknown field", true, `{"titlo":"x"}`, http.StatusBadRequest, `unknown field "titlo"`},
		{"a field in other case", true, `{"USUARIO_ID":1}`, http.StatusBadRequest, `"USUARIO_ID" matches "usuario_id" only when case is ignored`},
		{"a field twice", true, `{"usuario_id":1,"usuario_id":2}`, http.StatusBadRequest, `"usuario_id" appears twice`},
		{"a field twice, tolerant", false, `{"payload":{"a":1,"a":2}}`, http.StatusBadRequest, `"a" appears twice`},
		{"an unknown field, tolerated", false, `{"titlo":"x"}`, http.StatusOK, ""},
		{"two values", true, `{} {}`, http.StatusBadRequest, "more than one JSON value"},
		{"a stray brace", true, `{}}`, http.StatusBadRequest, "more than one JSON value"},
		{"trailing blanks", true, "{} \r\n\t", http.StatusOK, ""},
		{"empty", true, ``, http.StatusBadRequest, "body is empty"},
		{"not JSON", true, `{"titulo":`, http.StatusBadRequest, "not valid JSON"},
		{"NUL, strict", true, `{"titulo":"\u0000"}`, http.StatusBadRequest, "field titulo contains a NUL character"},
		{"NUL, tolerant", false, `{"payload":{"titulo":"\u0000"}}`, http.StatusBadRequest, "field payload.titulo contains a NUL character"},
		{"invalid UTF-8, tolerant", false, "{\"payload\":{\"titulo\":\"\xc3\x28\"}}", http.StatusBadRequest, "field payload.titulo is not valid UTF-8"},
		{"10,000 deep", false, `{"payload":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, http.StatusBadRequest, "more than 100 deep"},
		{"over the limit", true, `{"titulo":"` + strings.Repeat("a", 200000) + `"}`, http.StatusRequestEntityTooLarge, "larger than the limit of 100000 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Body = http.MaxBytesReader(w, r.Body, 100000)
				var c command
				decode := DecodeTolerant
				if tt.strict {
					decode = Decode
				}
				if decode(w, r, &c) {
					Write(w, http.StatusOK, c)
				}
			})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", "/", strings.NewReader(tt.body)))
			var out struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("answer is not JSON: %s", rec.Body)
			}
			if rec.Code != tt.code || !strings.Contains(out.Error, tt.want) {
				t.Fatalf("= %d %q, want %d %q", rec.Code, out.Error, tt.code, tt.want)
			}
			for _, goName := range []string{"int64", "uint8", "time.Time", "httpjson", "command", "Go ", "json:"} {
				if strings.Contains(out.Error, goName) {
					t.Errorf("message %q shows %q", out.Error, goName)
				}
			}
		})
	}
}

func TestServerError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		code       int
		retryAfter string
		level      string
	}{
		{"database away", fmt.Errorf("publish: %w: %w", handlers.ErrUnavailable, errors.New("connection refused")), http.StatusServiceUnavailable, "1", "level=WARN"},
		{"anything else", errors.New("tarefas: insert: syntax error"), http.StatusInternalServerError, "", "level=ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			rec := httptest.NewRecorder()
			ServerError(rec, httptest.NewRequest("POST", "/tarefas", nil), logger, tt.err)
			var out struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Error == "" {
				t.Fatalf("answer is not a JSON error: %s", rec.Body)
			}
			if rec.Code != tt.code || rec.Header().Get("Retry-After") != tt.retryAfter {
				t.Fatalf("= %d Retry-After %q, want %d %q", rec.Code, rec.Header().Get("Retry-After"), tt.code, tt.retryAfter)
			}
			if strings.Contains(out.Error, tt.err.Error()) {
				t.Errorf("the answer shows the internal error: %q", out.Error)
			}
			if !strings.Contains(logs.String(), tt.level) || !strings.Contains(logs.String(), tt.err.Error()) {
				t.Errorf("log = %s, want %s with the error", logs.String(), tt.level)
			}
		})
	}
}

// A use case's error is answered by its kind, in the plugin's own words,
// however it was wrapped; an error of no kind is the server's.
func TestFail(t *testing.T) {
	invalida := handlers.NewError(handlers.ErrInvalid, "requisição inválida")
	tests := []struct {
		err  error
		code int
		msg  string
	}{
		{fmt.Errorf("%w: titulo é obrigatório", invalida), http.StatusBadRequest, "requisição inválida: titulo é obrigatório"},
		{errors.Join(fmt.Errorf("%w: a", invalida), fmt.Errorf("%w: b", invalida)), http.StatusBadRequest, "requisição inválida: a\nrequisição inválida: b"},
		{handlers.NewError(handlers.ErrNotFound, "pedido não encontrado"), http.StatusNotFound, "pedido não encontrado"},
		{fmt.Errorf("%w: o pedido 1 foi cancelado", handlers.NewError(handlers.ErrConflict, "conflito")), http.StatusConflict, "conflito: o pedido 1 foi cancelado"},
		{fmt.Errorf("commit: %w", handlers.ErrUnavailable), http.StatusServiceUnavailable, "a service this request needs is unavailable; retry in 1 s"},
		{errors.New("insert: syntax error"), http.StatusInternalServerError, "internal error; see the server log"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		Fail(rec, httptest.NewRequest("GET", "/x", nil), slog.New(slog.DiscardHandler), tt.err)
		var out struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != tt.code || out.Error != tt.msg {
			t.Errorf("Fail(%q) = %d %s, want %d %q", tt.err, rec.Code, rec.Body, tt.code, tt.msg)
		}
	}
}

// A query string is read as strictly as a body: a misspelt or repeated
// parameter is the client's error, never silently dropped.
func TestQuery(t *testing.T) {
	tests := []struct {
		query   string
		want    map[string]string
		wantErr string
	}{
		{"", map[string]string{}, ""},
		{"a=1&b=x", map[string]string{"a": "1", "b": "x"}, ""},
		{"b=", map[string]string{"b": ""}, ""},
		{"a=1&c=2", nil, `unknown parameter "c" (accepted: a, b)`},
		{"a=1&a=2", nil, "parameter a is given more than once"},
		{"a=%zz", nil, `the query string is malformed: invalid URL escape "%zz"`},
	}
	for _, tt := range tests {
		got, err := Query(httptest.NewRequest("GET", "/x?"+tt.query, nil), "a", "b")
		switch {
		case tt.wantErr == "" && (err != nil || !reflect.DeepEqual(got, tt.want)):
			t.Errorf("Query(%q) = %v, %v; want %v", tt.query, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr || !errors.Is(err, handlers.ErrInvalid)):
			t.Errorf("Query(%q) = %v; want an invalid-input error %q", tt.query, err, tt.wantErr)
		}
	}
}
