package console

import "testing"

// An audit detail shows a value that is not text as JSON.
func TestAuditDetailAsText(t *testing.T) {
	str := funcs["string"].(func(any) string)
	for v, want := range map[any]string{"done": "done", 3.0: "3"} {
		if got := str(v); got != want {
			t.Errorf("string(%v) = %q, want %q", v, got, want)
		}
	}
	if got := str(map[string]any{"no route": 2}); got != `{"no route":2}` {
		t.Errorf("a map shows as %q", got)
	}
}
