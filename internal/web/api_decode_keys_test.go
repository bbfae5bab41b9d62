package web

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"parley/internal/fault"
)

// TestCheckKeys: one request says one thing. A key twice, in any object of the body, or a
// field's name in another case is a 400 naming the key; everything else is left to the decoder.
func TestCheckKeys(t *testing.T) {
	fields := jsonFieldNames(&resolveRequest{})
	if !fields["decision"] || !fields["content"] || fields["Decision"] {
		t.Fatalf("field names %v", fields)
	}
	cases := []struct {
		body string
		bad  bool
	}{
		{`{"decision":"approve"}`, false},
		{`{"decision":"approve","args":{"to":"a@example.test","To":"b"}}`, true}, // case-variant keys nested
		{`{"decision":"deny","DECISION":"approve"}`, true},                       // the example
		{`{"decision":"deny","decision":"approve"}`, true},                       // an exact duplicate
		{`{"DECISION":"approve"}`, true},                                         // a field in another case
		{`{"action":"accept","content":{"a":1,"b":{"a":2}}}`, false},             // the same key in two objects
		{`{"action":"accept","content":{"list":[{"a":1},{"a":2}]}}`, false},      // objects in an array are apart
		{`{"action":"accept","content":{"list":[{"a":1,"a":2}]}}`, true},
		{`{"result":{"x":[1,2,{"y":null}],"z":true}}`, false},
		{`{"decision":`, false},                           // malformed: the decoder's to word
		{`{"error":{"meſſage":"a","message":"b"}}`, true}, // long s folds to s, as encoding/json matches names
		{`{"remember":{"Kind":"a","kind":"b"}}`, true},    // the Kelvin sign folds to k
		// A number beyond float64 (args takes it raw) does not end the check (found writing FuzzCheckKeys' reference).
		{`{"args":1e400,"decision":"deny","DECISION":"approve"}`, true},
		{`{"args":[1e400],"DECISION":"approve"}`, true},
	}
	for _, c := range cases {
		err := checkKeys([]byte(c.body), fields)
		if (err != nil) != c.bad {
			t.Errorf("%s: %v, want refused=%v", c.body, err, c.bad)
		}
		if err != nil && fault.KindOf(err) != fault.KindBadRequest {
			t.Errorf("%s: kind %s, want bad_request", c.body, fault.KindOf(err))
		}
	}
}

// FuzzCheckKeys: checkKeys agrees with a reference written another way, and what it accepts
// means one thing to encoding/json.
//
//   - The reference parses the body into ordered objects (every key kept, in order) and refuses
//     it when two keys of one object are equal under strings.EqualFold (the equality
//     encoding/json matches names with), or a top-level key is a field's name under EqualFold but
//     not exactly. On valid JSON checkKeys refuses exactly when the reference does, and every
//     refusal is a bad_request naming a key of the body.
//   - A body it accepts decodes to the same value whichever duplicate encoding/json would have
//     kept: decoded into any (encoding/json keeps the last of a key), it equals the reference's
//     value that keeps the first; and decoded into a resolve body, each field holds what the key
//     spelled exactly as the field holds alone, so no other spelling reached it.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"decision":"approve"}`, `{"a":{"b":[{"c":1}]}}`, `[{"a":1,"A":2}]`, `{"":1,"":2}`, `{`, `"x"`,
		`{"decision":"deny","DECISION":"approve"}`, `{"Decision":"approve"}`, `{"reaſon":"x"}`,
		`{"remember":{"ſcope":"a","scope":"b"}}`, `{"args":{"k":1,"\u212a":2}}`, `{"a":1} {"A":2}`,
		`{"content":{"list":[{"a":1},{"a":2}]},"action":"accept"}`, `{"result":null,"error":{"message":"m"}}`,
		`{"args":1e400,"decision":"deny","DECISION":"approve"}`, // the check stopped at the number
	} {
		f.Add(s)
	}
	fields := jsonFieldNames(&resolveRequest{})
	f.Fuzz(func(t *testing.T, body string) {
		err := checkKeys([]byte(body), fields)
		if err != nil {
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Kind != fault.KindBadRequest {
				t.Fatalf("%q: refused with %v, want a bad_request", body, err)
			}
			key, _ := fe.Details["field"].(string)
			if !bodyHasKey(body, key) {
				t.Fatalf("%q: the refusal names %q, not a key of the body", body, key)
			}
		}
		if !json.Valid([]byte(body)) {
			return // malformed: the decoder refuses it whatever checkKeys said
		}
		root := parseOrdered(t, body)
		if want := root.refused(fields, true); (err != nil) != want {
			t.Fatalf("%q: checkKeys says %v; the reference refuses: %v", body, err, want)
		}
		if err != nil {
			return
		}
		var last any
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber() // 1e400 is valid JSON
		if err := dec.Decode(&last); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if first := root.firstWins(); !reflect.DeepEqual(first, last) {
			t.Fatalf("%q: keeping the first of a key gives %#v, keeping the last %#v", body, first, last)
		}
		sameAsExactKeys(t, body)
	})
}

// ordered is a JSON value with every key of its objects kept, in order.
type ordered struct {
	keys   []string  // an object's keys
	vals   []ordered // an object's values or an array's elements
	object bool
	array  bool
	scalar any
}

// parseOrdered parses a valid JSON body recursively from the decoder's tokens (numbers as
// json.Number: any valid number parses).
func parseOrdered(t *testing.T, body string) ordered {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var value func() ordered
	value = func() ordered {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		switch tok {
		case json.Delim('{'):
			o := ordered{object: true}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					t.Fatalf("%q: %v", body, err)
				}
				o.keys = append(o.keys, k.(string))
				o.vals = append(o.vals, value())
			}
			dec.Token() // }
			return o
		case json.Delim('['):
			o := ordered{array: true}
			for dec.More() {
				o.vals = append(o.vals, value())
			}
			dec.Token() // ]
			return o
		}
		return ordered{scalar: tok}
	}
	return value()
}

// refused is the reference check: two keys of one object alike under strings.EqualFold, or (at
// the top) a key that is a field's name in another spelling.
func (o ordered) refused(fields map[string]bool, top bool) bool {
	for i, k := range o.keys {
		for _, k2 := range o.keys[:i] {
			if strings.EqualFold(k, k2) {
				return true
			}
		}
		if top && !fields[k] {
			for f := range fields {
				if strings.EqualFold(f, k) {
					return true
				}
			}
		}
	}
	for _, v := range o.vals {
		if v.refused(fields, false) {
			return true
		}
	}
	return false
}

// firstWins is the value as encoding/json would decode it into any, but keeping the first of a
// duplicated key rather than the last.
func (o ordered) firstWins() any {
	switch {
	case o.object:
		m := map[string]any{}
		for i, k := range o.keys {
			if _, seen := m[k]; !seen {
				m[k] = o.vals[i].firstWins()
			}
		}
		return m
	case o.array:
		a := []any{}
		for _, v := range o.vals {
			a = append(a, v.firstWins())
		}
		return a
	}
	return o.scalar
}

// sameAsExactKeys: a top-level object decoded into a resolve body (resolveRequest) gives each field what the key
// spelled exactly as the field's name gives it alone (and the zero value without that key).
func sameAsExactKeys(t *testing.T, body string) {
	var whole resolveRequest
	var keys map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &whole) != nil || json.Unmarshal([]byte(body), &keys) != nil {
		return // not an object, or a value of the wrong type: the decoder refuses it
	}
	v := reflect.ValueOf(whole)
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		alone := reflect.New(v.Type().Field(i).Type)
		if raw, ok := keys[name]; ok {
			if err := json.Unmarshal(raw, alone.Interface()); err != nil {
				t.Fatalf("%q: %s alone: %v", body, name, err)
			}
		}
		if got, want := v.Field(i).Interface(), alone.Elem().Interface(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: field %s decoded as %#v from the body, %#v from its own key", body, name, got, want)
		}
	}
}

// bodyHasKey reports whether key is an object key of the body (as far as it parses).
func bodyHasKey(body, key string) bool {
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var objects []bool // per open container: is it an object
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && expectKey && s == key {
			return true
		}
		switch tok {
		case json.Delim('{'):
			objects = append(objects, true)
		case json.Delim('['):
			objects = append(objects, false)
		case json.Delim('}'), json.Delim(']'):
			objects = objects[:len(objects)-1]
		}
		// After a key the value follows; after a value, within an object, a key.
		_, isString := tok.(string)
		inObject := len(objects) > 0 && objects[len(objects)-1]
		switch {
		case tok == json.Delim('{'):
			expectKey = true
		case isString && expectKey:
			expectKey = false
		default:
			expectKey = inObject
		}
	}
}
