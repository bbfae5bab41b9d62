package tools

import (
	"encoding/json"
	"parley/internal/fault"
	"strings"
	"testing"
)

func TestCheckElicitationSchemaAccepts(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"string"}}}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","title":"T","description":"D","properties":{
			"s":{"type":"string","title":"S","description":"d","minLength":1,"maxLength":5,"default":"abc"},
			"e":{"type":"string","enum":["x","y"],"enumNames":["X","Y"],"default":"y"},
			"m":{"type":"string","format":"email"},"u":{"type":"string","format":"uri"},
			"d":{"type":"string","format":"date"},"t":{"type":"string","format":"date-time"},
			"n":{"type":"number","minimum":0.5,"maximum":9,"default":1.5},
			"i":{"type":"integer","minimum":1,"default":2},
			"b":{"type":"boolean","default":false}},
		  "required":["s","b"]}`,
	} {
		if e := CheckElicitationSchema(json.RawMessage(s)); e != nil {
			t.Errorf("refused %s: %v", s, e)
		}
	}
}

// TestCheckElicitationSchemaRefuses: each rule of the MCP elicitation subset, with the JSON
// path the problem is reported at.
func TestCheckElicitationSchemaRefuses(t *testing.T) {
	prop := func(p string) string { return `{"type":"object","properties":{"p":` + p + `}}` }
	cases := []struct {
		name, schema, path, msg string
	}{
		{"not JSON", `{`, "", "not a JSON object"},
		{"not object type", `{"type":"array","properties":{"p":{"type":"string"}}}`, "/type", `"type": "object"`},
		{"no properties", `{"type":"object"}`, "/properties", "at least one property"},
		{"empty properties", `{"type":"object","properties":{}}`, "/properties", "at least one property"},
		{"top-level keyword", `{"type":"object","properties":{"p":{"type":"string"}},"additionalProperties":false}`, "/additionalProperties", `keyword "additionalProperties" is not allowed`},
		{"property not object", `{"type":"object","properties":{"p":true}}`, "/properties/p", "must be an object"},
		{"nested object", prop(`{"type":"object"}`), "/properties/p/type", "not one of string, number, integer, boolean"},
		{"array", prop(`{"type":"array","items":{"type":"string"}}`), "/properties/p/type", "not one of"},
		{"type list", prop(`{"type":["string","null"]}`), "/properties/p/type", "not one of"},
		{"no type", prop(`{"title":"x"}`), "/properties/p/type", "not one of"},
		{"ref", prop(`{"type":"string","$ref":"#/x"}`), "/properties/p/$ref", `keyword "$ref" is not allowed`},
		{"pattern", prop(`{"type":"string","pattern":"^a"}`), "/properties/p/pattern", `keyword "pattern" is not allowed`},
		{"bad format", prop(`{"type":"string","format":"ipv4"}`), "/properties/p/format", "not one of email, uri, date, date-time"},
		{"format on number", prop(`{"type":"number","format":"email"}`), "/properties/p/format", `keyword "format" is not allowed in a number form property`},
		{"enum on boolean", prop(`{"type":"boolean","enum":[true]}`), "/properties/p/enum", `keyword "enum" is not allowed in a boolean`},
		{"enum on integer", prop(`{"type":"integer","enum":[1,2]}`), "/properties/p/enum", `keyword "enum" is not allowed in a integer`},
		{"minimum on string", prop(`{"type":"string","minimum":1}`), "/properties/p/minimum", `keyword "minimum" is not allowed in a string`},
		{"minLength on number", prop(`{"type":"number","minLength":1}`), "/properties/p/minLength", `not allowed in a number`},
		{"empty enum", prop(`{"type":"string","enum":[]}`), "/properties/p/enum", "non-empty array of strings"},
		{"enum of numbers", prop(`{"type":"string","enum":["a",1]}`), "/properties/p/enum", "non-empty array of strings"},
		{"enum not array", prop(`{"type":"string","enum":"a"}`), "/properties/p/enum", "non-empty array of strings"},
		{"enumNames length", prop(`{"type":"string","enum":["a","b"],"enumNames":["A"]}`), "/properties/p/enumNames", "as long as enum"},
		{"default wrong type", prop(`{"type":"boolean","default":"yes"}`), "/properties/p/default", "not a valid boolean value"},
		{"default not in enum", prop(`{"type":"string","enum":["a"],"default":"b"}`), "/properties/p/default", "not a valid string value"},
		{"default fractional integer", prop(`{"type":"integer","default":1.5}`), "/properties/p/default", "not a valid integer value"},
		{"default string for number", prop(`{"type":"number","default":"1"}`), "/properties/p/default", "not a valid number value"},
		{"required not array", `{"type":"object","properties":{"p":{"type":"string"}},"required":"p"}`, "/required", "must be an array"},
		{"required unknown", `{"type":"object","properties":{"p":{"type":"string"}},"required":["q"]}`, "/required", "not a property"},
		{"slash in name escaped", `{"type":"object","properties":{"a/b":{"type":"date"}}}`, "/properties/a~1b/type", "not one of"},
		{"remote metaschema", `{"$schema":"file:///dev/zero","type":"object","properties":{"p":{"type":"string"}}}`, "", "does not compile"},
		{"bad bound", prop(`{"type":"string","minLength":-1}`), "", "does not compile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := CheckElicitationSchema(json.RawMessage(c.schema))
			if e == nil {
				t.Fatalf("accepted %s", c.schema)
			}
			if e.Kind != fault.KindInvalidArgs {
				t.Errorf("kind %q", e.Kind)
			}
			if c.path == "" {
				if !strings.Contains(e.Message, c.msg) {
					t.Errorf("message %q, want %q", e.Message, c.msg)
				}
				return
			}
			for _, p := range problemsOf(t, e) {
				if p["path"] == c.path && strings.Contains(p["message"].(string), c.msg) {
					return
				}
			}
			t.Errorf("no problem at %s saying %q in %v", c.path, c.msg, e.Problems)
		})
	}
}

func TestCheckElicitationSchemaListsEveryProblem(t *testing.T) {
	e := CheckElicitationSchema(json.RawMessage(`{"type":"object","oneOf":[],"properties":{"a":{"type":"array"},"b":{"type":"string","format":"ipv6"}},"required":["c"]}`))
	if e == nil {
		t.Fatal("accepted")
	}
	var paths []string
	for _, p := range problemsOf(t, e) {
		paths = append(paths, p["path"].(string))
	}
	if got := strings.Join(paths, " "); got != "/oneOf /properties/a/type /properties/b/format /required" {
		t.Errorf("problems at %s", got)
	}
}
