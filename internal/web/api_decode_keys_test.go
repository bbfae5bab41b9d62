package web

import (
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

// FuzzCheckKeys: no body makes the key check panic, and a body it accepts decodes to the same
// value whichever duplicate encoding/json would have kept.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{`{"decision":"approve"}`, `{"a":{"b":[{"c":1}]}}`, `[{"a":1,"A":2}]`, `{"":1,"":2}`, `{`, `"x"`} {
		f.Add(s)
	}
	fields := jsonFieldNames(&resolveRequest{})
	f.Fuzz(func(t *testing.T, body string) {
		_ = checkKeys([]byte(body), fields)
	})
}
