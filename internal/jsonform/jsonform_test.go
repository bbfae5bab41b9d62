package jsonform

import (
	"encoding/json"
	"testing"

	"parley/internal/fault"
)

const formSchema = `{"type":"object","title":"About you","description":"We need a few details.","properties":{
 "name":{"type":"string","title":"Your name","description":"As on your passport"},
 "email":{"type":"string","format":"email"},
 "site":{"type":"string","format":"uri"},
 "born":{"type":"string","format":"date"},
 "meet":{"type":"string","format":"date-time"},
 "size":{"type":"string","enum":["s","m","l"],"enumNames":["Small","Medium","Large"]},
 "age":{"type":"integer","minimum":0,"maximum":150},
 "score":{"type":"number"},
 "subscribe":{"type":"boolean","title":"Subscribe","default":true}},
 "required":["name","email"]}`

const emailSchema = `{"type":"object","properties":{"to":{"type":"string","format":"email","title":"To"},"subject":{"type":"string"},"body":{"type":"string"},"urgent":{"type":"boolean"},"copies":{"type":"integer"}},"required":["to","subject","body"]}`

func TestContentAndFieldErrors(t *testing.T) {
	fs, err := Parse(json.RawMessage(formSchema))
	if err != nil {
		t.Fatal(err)
	}
	content, errs := fs.Content(map[string]string{"name": " Ann ", "age": "41", "score": "2.5", "meet": "2026-11-22T10:30", "site": "", "subscribe": "on"})
	want := map[string]any{"name": "Ann", "age": int64(41), "score": 2.5, "meet": "2026-11-22T10:30:00Z", "subscribe": true}
	if len(errs) != 0 {
		t.Errorf("errors = %v", errs)
	}
	for k, v := range want {
		if content[k] != v {
			t.Errorf("content[%s] = %#v, want %#v", k, content[k], v)
		}
	}
	if _, ok := content["site"]; ok {
		t.Errorf("empty optional field sent")
	}
	if _, ok := content["email"]; ok {
		t.Errorf("missing field invented")
	}
	_, errs = fs.Content(map[string]string{"age": "4.5", "score": "many"})
	if errs["age"] == "" || errs["score"] == "" {
		t.Errorf("conversion errors = %v", errs)
	}
	if c, _ := fs.Content(map[string]string{}); c["subscribe"] != false {
		t.Errorf("unchecked box = %#v, want false", c["subscribe"])
	}

	fe := fs.FieldErrors([]fault.Problem{
		{Path: "", Message: "missing properties: 'name', 'email'"},
		{Path: "/age", Message: "must be <= 150"},
		{Path: "", Message: "something global"},
	})
	if fe["name"] != "This field is required." || fe["email"] != "This field is required." || fe["age"] != "must be <= 150" || fe[""] != "something global" {
		t.Errorf("field errors = %v", fe)
	}
}

func TestArgs(t *testing.T) {
	orig := json.RawMessage(`{"to":"bob@example.com","subject":"lunch","body":"line 1\nline 2","copies":2}`)
	canon := func(raw json.RawMessage) string {
		var v any
		_ = json.Unmarshal(raw, &v)
		b, _ := json.Marshal(v)
		return string(b)
	}
	// Untouched fields give the same arguments (a checkbox that was absent stays absent).
	same := map[string]string{"to": "bob@example.com", "subject": "lunch", "body": "line 1\r\nline 2", "copies": "2"}
	got, errs, err := mustParse(t, emailSchema).Args(orig, same)
	if err != nil || len(errs) != 0 || canon(got) != canon(orig) {
		t.Fatalf("untouched = %s %v %v, want %s", got, errs, err, orig)
	}
	// Edits: typed by the schema; an empty optional field is removed; a checked box is true.
	got, errs, err = mustParse(t, emailSchema).Args(orig, map[string]string{"to": "carol@example.com", "subject": "lunch", "body": "hi", "copies": "", "urgent": "on"})
	if err != nil || len(errs) != 0 || canon(got) != `{"body":"hi","subject":"lunch","to":"carol@example.com","urgent":true}` {
		t.Fatalf("edited = %s %v %v", got, errs, err)
	}
	// A word in a number field is an error beside it; nothing is built.
	got, errs, _ = mustParse(t, emailSchema).Args(orig, map[string]string{"to": "x", "subject": "s", "body": "b", "copies": "two"})
	if got != nil || errs["copies"] != "Enter a whole number." {
		t.Fatalf("a word in an integer field = %s %v", got, errs)
	}
	// Properties the form does not show stay as they were.
	got, _, _ = mustParse(t, `{"type":"object","properties":{"a":{"type":"string"}}}`).Args(json.RawMessage(`{"a":"1","extra":[1,2]}`), map[string]string{"a": "2"})
	if canon(got) != `{"a":"2","extra":[1,2]}` {
		t.Fatalf("extra property = %s", got)
	}
}

func mustParse(t *testing.T, raw string) Schema {
	t.Helper()
	fs, err := Parse(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestShows: fields show a call's arguments only when each property has one; a property the
// schema does not name (allowed by default), or arguments that are not an object, are not shown
// by fields.
func TestShows(t *testing.T) {
	fs, err := Parse(json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"amount":{"type":"integer"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]bool{
		`{"to":"a","amount":1}`:                true,
		`{"to":"a"}`:                           true,
		`{}`:                                   true,
		`{"to":"a","cc":"thief@evil.test"}`:    false,
		`{"to":"a","amount":1,"memo":{"x":1}}`: false,
		`null`:                                 false,
		`[]`:                                   false,
		`not json`:                             false,
	} {
		if got := fs.Shows(json.RawMessage(args)); got != want {
			t.Errorf("Shows(%s) = %v, want %v", args, got, want)
		}
	}
}
