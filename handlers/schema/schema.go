// Package schema derives the JSON Schema of an event's payload from the Go
// type a plugin declares for it, and holds payloads to that schema. The
// schema says what encoding/json writes for the type, so it cannot drift
// from the code: a field not marked omitempty (or omitzero) is required, a
// pointer may be null, and fields the type does not know are allowed,
// since consumers must tolerate them (seed 001). Types are written out in
// place, with no $ref, so the same schema reads alike inside the AsyncAPI
// document and on its own.
package schema

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Schema is the part of JSON Schema the reflector writes: keywords that
// mean the same in draft-07 (the AsyncAPI Schema's base) and 2020-12.
type Schema struct {
	Description     string  `json:"description,omitempty"`
	Type            Types   `json:"type,omitempty"`
	Const           any     `json:"const,omitempty"`
	Format          string  `json:"format,omitempty"`
	ContentEncoding string  `json:"contentEncoding,omitempty"`
	Minimum         *int64  `json:"minimum,omitempty"`
	Items           *Schema `json:"items,omitempty"`
	MinItems        *int    `json:"minItems,omitempty"`
	MaxItems        *int    `json:"maxItems,omitempty"`
	// Properties are the fields of an object, by their JSON name.
	Properties map[string]*Schema `json:"properties,omitempty"`
	// Required lists the fields always present, in the type's order.
	Required []string `json:"required,omitempty"`
	// AdditionalProperties is the schema of a map's values.
	AdditionalProperties *Schema `json:"additionalProperties,omitempty"`
}

// Types is the type keyword: one name, written as a string, or several.
type Types []string

// MarshalJSON writes one type as a string, several as an array.
func (t Types) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// For returns the schema of the JSON encoding/json writes for t. A type
// that refers to itself, a channel, a function or a complex number has no
// such schema: For says which field holds it.
func For(t reflect.Type) (*Schema, error) {
	if t == nil {
		return nil, errors.New("schema: no type given")
	}
	return of(t, nil)
}

// of is For with the struct types being walked, to catch recursion.
func of(t reflect.Type, walking []reflect.Type) (*Schema, error) {
	switch {
	case t == timeType:
		return &Schema{Type: Types{"string"}, Format: "date-time"}, nil
	case t == rawMessageType:
		return &Schema{}, nil // any JSON value
	case t.Kind() != reflect.Pointer && (t.Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(jsonMarshalerType)):
		return &Schema{}, nil // it writes itself: nothing to say about it
	case t.Kind() != reflect.Pointer && (t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)):
		return &Schema{Type: Types{"string"}}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return &Schema{Type: Types{"boolean"}}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &Schema{Type: Types{"integer"}}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		zero := int64(0)
		return &Schema{Type: Types{"integer"}, Minimum: &zero}, nil
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: Types{"number"}}, nil
	case reflect.String:
		return &Schema{Type: Types{"string"}}, nil
	case reflect.Interface:
		return &Schema{}, nil
	case reflect.Pointer:
		s, err := of(t.Elem(), walking)
		if err != nil {
			return nil, err
		}
		if len(s.Type) > 0 {
			s.Type = append(s.Type, "null") // a nil pointer is written null
		}
		return s, nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !t.Elem().Implements(jsonMarshalerType) {
			return &Schema{Type: Types{"string"}, ContentEncoding: "base64"}, nil
		}
		items, err := of(t.Elem(), walking)
		if err != nil {
			return nil, err
		}
		s := &Schema{Type: Types{"array"}, Items: items}
		if t.Kind() == reflect.Array {
			n := t.Len()
			s.MinItems, s.MaxItems = &n, &n
		}
		return s, nil
	case reflect.Map:
		switch k := t.Key(); {
		case k.Kind() == reflect.String, k.Implements(textMarshalerType),
			k.Kind() >= reflect.Int && k.Kind() <= reflect.Uintptr:
		default:
			return nil, fmt.Errorf("schema: %s: encoding/json cannot write a map keyed by %s", t, k)
		}
		values, err := of(t.Elem(), walking)
		if err != nil {
			return nil, err
		}
		return &Schema{Type: Types{"object"}, AdditionalProperties: values}, nil
	case reflect.Struct:
		return object(t, walking)
	default:
		return nil, fmt.Errorf("schema: encoding/json cannot write a %s", t)
	}
}

// object is the schema of a struct: its exported fields by their JSON
// names, those of embedded structs promoted as encoding/json promotes
// them (a field of the outer struct wins).
func object(t reflect.Type, walking []reflect.Type) (*Schema, error) {
	for _, w := range walking {
		if w == t {
			return nil, fmt.Errorf("schema: %s refers to itself; a payload type must be a tree", t)
		}
	}
	walking = append(walking, t)
	s := &Schema{Type: Types{"object"}, Properties: map[string]*Schema{}}
	if err := fields(t, walking, s); err != nil {
		return nil, err
	}
	return s, nil
}

// fields adds the fields of struct t to s, skipping names s has.
func fields(t reflect.Type, walking []reflect.Type, s *Schema) error {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := s.Properties[name]; ok {
			continue
		}
		fs, err := of(ft, walking)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		if hasOpt(opts, "string") { // ,string quotes numbers and booleans
			switch ft.Kind() {
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
				fs = &Schema{Type: Types{"string"}}
			}
		}
		s.Properties[name] = fs
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			s.Required = append(s.Required, name)
		}
	}
	for _, e := range embedded {
		if err := fields(e, walking, s); err != nil {
			return err
		}
	}
	return nil
}

// hasOpt reports whether a json tag's options list opt.
func hasOpt(opts, opt string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}
