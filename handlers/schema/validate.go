package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Validator holds payloads to one schema.
type Validator struct {
	compiled *jsonschema.Schema
}

// Compile readies s to check payloads; name only tells schemas apart in
// errors.
func Compile(name string, s *Schema) (*Validator, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // a time must be RFC 3339, as encoding/json reads it
	url := "mem:///payloads/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	return &Validator{compiled: compiled}, nil
}

// Mismatch is a payload that does not match its schema: where, and what
// is wrong there.
type Mismatch struct {
	// Path names the value as messages name fields: payload.itens[0].quantidade;
	// the payload itself is "payload".
	Path    string
	Problem string
}

func (m *Mismatch) Error() string { return m.Path + " " + m.Problem }

// printer words the validator's messages.
var printer = message.NewPrinter(language.English)

// Check returns nil for a payload that matches, or a *Mismatch for the
// first failing value: of all the failures, the one whose path comes
// first, so the same payload always gets the same answer.
func (v *Validator) Check(payload []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &Mismatch{Path: "payload", Problem: "is not valid JSON: " + err.Error()}
	}
	err = v.compiled.Validate(inst)
	var verr *jsonschema.ValidationError
	if err == nil {
		return nil
	}
	if !errors.As(err, &verr) {
		return fmt.Errorf("check payload: %w", err)
	}
	var found []*Mismatch
	collect(verr, inst, &found)
	if len(found) == 0 {
		return &Mismatch{Path: "payload", Problem: verr.ErrorKind.LocalizedString(printer)}
	}
	slices.SortFunc(found, func(a, b *Mismatch) int { return strings.Compare(a.Path, b.Path) })
	return found[0]
}

// collect adds the leaves of e's tree of causes to found, each named by
// its path in inst.
func collect(e *jsonschema.ValidationError, inst any, found *[]*Mismatch) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			collect(c, inst, found)
		}
		return
	}
	loc, problem := e.InstanceLocation, ""
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		missing := slices.Sorted(slices.Values(k.Missing))
		loc, problem = append(slices.Clone(loc), missing[0]), "is missing"
	case *kind.Type:
		problem = fmt.Sprintf("must be %s, got %s", strings.Join(k.Want, " or "), k.Got)
	default:
		problem = e.ErrorKind.LocalizedString(printer)
	}
	*found = append(*found, &Mismatch{Path: path(loc, inst), Problem: problem})
}

// path names loc, a list of keys and indexes into inst, the way the
// platform's messages name fields: payload.itens[1].quantidade.
func path(loc []string, inst any) string {
	var b strings.Builder
	b.WriteString("payload")
	at := inst
	for _, seg := range loc {
		switch v := at.(type) {
		case []any:
			i, _ := strconv.Atoi(seg)
			fmt.Fprintf(&b, "[%d]", i)
			if i >= 0 && i < len(v) {
				at = v[i]
			} else {
				at = nil
			}
		case map[string]any:
			if PlainKey(seg) {
				b.WriteString("." + seg)
			} else {
				fmt.Fprintf(&b, "[%s]", strconv.Quote(seg))
			}
			at = v[seg]
		default:
			b.WriteString("." + seg)
			at = nil
		}
	}
	return b.String()
}

// PlainKey reports whether a field name reads unambiguously in a dotted
// path (payload.titulo), or needs quoting (payload["a.b"]): the schema
// check here and the JSON decoder's errors (httpjson) name fields alike.
func PlainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range []byte(k) {
		if !(c == '_' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
