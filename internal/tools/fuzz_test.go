package tools

import (
	"encoding/json"
	"parley/internal/fault"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzTruncate(f *testing.F) {
	f.Add("hello", 3)
	f.Add(strings.Repeat("é", 40), 41)
	f.Add(strings.Repeat("😀", 30), 50)
	f.Add("\xff\xfe\xc3", 2)
	f.Add(strings.Repeat("a", 100), 0)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max > 1<<20 || max < -1 {
			max %= 1 << 20
		}
		got := Truncate(s, max)
		bound := max
		if bound <= 0 {
			bound = DefaultMaxOutputBytes
		}
		if len(got) > bound {
			t.Fatalf("%d bytes over the bound %d", len(got), bound)
		}
		if len(s) <= bound {
			if got != s {
				t.Fatalf("text within the bound was changed")
			}
			return
		}
		// What is kept of the input is a prefix cut at a rune start: valid input stays valid.
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("cut a UTF-8 character: %q", got)
		}
		if i := strings.Index(got, "\n…[truncated: "); i >= 0 {
			if !strings.HasPrefix(s, got[:i]) {
				t.Fatalf("kept text is not a prefix of the input")
			}
		} else if bound > 64 {
			t.Fatalf("no marker in a cut of %d bytes to %d", len(s), bound)
		}
	})
}

func FuzzBoundEnvelope(f *testing.F) {
	f.Add(`{"ok":true,"result":"`+strings.Repeat("x", 400)+`"}`, 300)
	f.Add(`{"ok":false,"error":{"kind":"invalid_args","message":"`+strings.Repeat("\\u0000", 200)+`","details":{"a":[1,2,3]}}}`, 260)
	f.Add(strings.Repeat("<>&\x00é", 200), 256)
	f.Add(`{"ok":false}`, 0)
	f.Add(`{"ok":true,"result":{"k":"`+strings.Repeat("\\\"", 300)+`"}}`, 400)
	f.Fuzz(func(t *testing.T, body string, max int) {
		if max > 1<<16 || max < -1 {
			max %= 1 << 16
		}
		got := BoundEnvelope(json.RawMessage(body), max)
		bound := max
		if bound <= 0 {
			bound = DefaultMaxOutputBytes
		}
		bound = boundMax(bound)
		if len(body) <= bound {
			if string(got) != body {
				t.Fatal("an envelope within the bound was changed")
			}
			return
		}
		if len(got) > bound {
			t.Fatalf("%d bytes over the bound %d", len(got), bound)
		}
		var env struct {
			OK        *bool `json:"ok"`
			Truncated bool  `json:"truncated"`
		}
		if err := json.Unmarshal(got, &env); err != nil {
			t.Fatalf("not valid JSON: %v: %s", err, got)
		}
		if env.OK == nil || !env.Truncated {
			t.Fatalf("a bounded envelope lacks ok or truncated: %s", got)
		}
	})
}

func FuzzValidateArgs(f *testing.F) {
	tool, err := New(Spec{Name: "fuzz", Executor: Server, Func: noop, Parameters: json.RawMessage(`{
		"type":"object",
		"properties":{
			"s":{"type":"string","maxLength":5,"format":"email"},
			"n":{"type":"integer","minimum":0,"multipleOf":3},
			"f":{"type":"number","exclusiveMaximum":1e10},
			"a":{"type":"array","items":{"enum":["x","y",1]},"uniqueItems":true},
			"o":{"type":"object","properties":{"d":{"type":"string","format":"date-time"}},"required":["d"]},
			"u":{"anyOf":[{"type":"boolean"},{"type":"null"}]}
		},
		"required":["s"],
		"additionalProperties":false}`)})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"s":"a@b.c"}`, `{"s":"toolong@example.com","n":-4,"a":["x","x"]}`, `{"n":1e400}`, `{}}`, `[]`, ``,
		`{"s":"a@b","o":{"d":"2026-01-01T00:00:00Z"},"u":null}`, `{"s":1,"f":1e10,"o":{}}`, `{"s":"\ud800"}`,
		`{"n":123456789012345678901234567890}`, `{"f":-0.0,"n":3.0,"s":"x@y.z"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		args, e := tool.ValidateArgs(json.RawMessage(raw))
		if (args == nil) == (e == nil) {
			t.Fatalf("exactly one of args and error must be set: %v %v", args, e)
		}
		if e != nil {
			if e.Kind != fault.KindInvalidArgs {
				t.Fatalf("kind %q", e.Kind)
			}
			ps := e.Problems
			if len(ps) == 0 {
				// Only a second value after the first is reported without a path.
				if !strings.Contains(e.Message, "not valid JSON") {
					t.Fatalf("no problems listed: %+v", e)
				}
			}
			for _, p := range ps {
				path := p.Path
				if path != "" && !strings.HasPrefix(path, "/") {
					t.Fatalf("problem path %q is not a JSON pointer", path)
				}
			}
			if !json.Valid(ErrorEnvelope(e)) {
				t.Fatal("error envelope is not JSON")
			}
			return
		}
		// Accepted arguments are plain JSON values: they re-encode, and validate again.
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatalf("accepted arguments do not encode: %v", err)
		}
		if _, e := tool.ValidateArgs(b); e != nil {
			t.Fatalf("re-encoded arguments %s no longer validate: %v", b, e)
		}
		if !json.Valid(OKEnvelope(args)) {
			t.Fatal("envelope of accepted arguments is not JSON")
		}
	})
}
