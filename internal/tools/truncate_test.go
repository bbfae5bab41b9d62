package tools

import (
	"encoding/json"
	"fmt"
	"os"
	"parley/internal/fault"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	long := strings.Repeat("a", 20000)
	cases := []struct {
		name string
		s    string
		max  int
		want string // exact output, or "" to check only the properties
	}{
		{"short kept", "hello", 10, "hello"},
		{"exact fit kept", "hello", 5, "hello"},
		{"default bound", strings.Repeat("x", DefaultMaxOutputBytes), 0, strings.Repeat("x", DefaultMaxOutputBytes)},
		{"cut with marker", strings.Repeat("x", 100), 60, strings.Repeat("x", 21) + fmt.Sprintf(TruncationMarker, 21, 100)}, // 60 - the 39-byte widest marker
		{"default bound cut", long, 0, ""},
		{"never splits a rune", strings.Repeat("é", 100), 50, ""}, // 50 - 39 = 11: mid-rune
		{"four-byte runes", strings.Repeat("😀", 100), 77, ""},
		{"bound smaller than the marker", strings.Repeat("界", 50), 5, ""},
		{"bound of one", "ab", 1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Truncate(c.s, c.max)
			bound := c.max
			if bound <= 0 {
				bound = DefaultMaxOutputBytes
			}
			if len(got) > bound {
				t.Errorf("%d bytes, bound %d", len(got), bound)
			}
			if !utf8.ValidString(got) {
				t.Errorf("cut a UTF-8 character: %q", got)
			}
			if c.want != "" && got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if len(c.s) > bound && bound >= 64 && !strings.Contains(got, "[truncated: ") {
				t.Errorf("no marker in %q", got[max(0, len(got)-60):])
			}
		})
	}
}

func TestBoundEnvelope(t *testing.T) {
	bigResult := OKEnvelope(map[string]any{"rows": strings.Repeat("row,", 10000)})
	bigString := OKEnvelope(strings.Repeat("\x00<", 9000)) // escaping grows it sixfold
	bigError := ErrorEnvelope(fault.New(fault.KindInvalidArgs, strings.Repeat("bad ", 3000), map[string]any{"problems": strings.Repeat("p", 30000)}))
	cases := []struct {
		name     string
		env      json.RawMessage
		max      int
		ok       bool
		kind     fault.Kind
		contains string
	}{
		{"small kept as is", OKEnvelope("hi"), 0, true, "", `{"ok":true,"result":"hi"}`},
		{"big result", bigResult, 1000, true, "", `{"ok":true,"truncated":true,"result":"{\"rows\":\"row,row,`},
		{"big string result stays text", OKEnvelope(strings.Repeat("word ", 5000)), 500, true, "", `"result":"word word`},
		{"escaping growth", bigString, 2000, true, "", `"truncated":true`},
		{"error keeps its kind", bigError, 800, false, fault.KindInvalidArgs, `"message":"bad bad`},
		{"error details as text", ErrorEnvelope(fault.New(fault.KindHTTPError, "503", map[string]any{"body": strings.Repeat("z", 5000)})), 600, false, fault.KindHTTPError, `"details":{"text":"{\"body\":\"zzz`},
		{"below the minimum bound", bigResult, 10, true, "", `"truncated":true`},
		{"not an envelope", json.RawMessage(strings.Repeat("y", 3000)), 300, true, "", `"result":"yyy`},
		{"error without error object", json.RawMessage(`{"ok":false,"pad":"` + strings.Repeat("q", 3000) + `"}`), 300, true, "", `"truncated":true`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := BoundEnvelope(c.env, c.max)
			bound := boundMax(c.max)
			if c.max == 0 {
				bound = DefaultMaxOutputBytes
			}
			if len(got) > bound {
				t.Errorf("%d bytes, bound %d", len(got), bound)
			}
			m := decodeEnvelope(t, got)
			if m["ok"] != c.ok {
				t.Errorf("ok flag %v in %s", m["ok"], got)
			}
			if c.kind != "" {
				if e, _ := m["error"].(map[string]any); e == nil || e["kind"] != string(c.kind) {
					t.Errorf("kind lost: %s", got)
				}
			}
			if !strings.Contains(string(got), c.contains) {
				t.Errorf("%s does not contain %s", got, c.contains)
			}
			if !utf8.Valid(got) {
				t.Error("invalid UTF-8")
			}
		})
	}
}

func TestOutcomeEnvelopeUsesTheToolBound(t *testing.T) {
	tool := mustTool(t, Spec{Name: "big", Executor: Server, Func: noop, MaxOutputBytes: 300})
	out := Outcome{Status: OK, Result: strings.Repeat("ü", 1000)}
	env := out.Envelope(tool.MaxOutputBytes())
	if len(env) > 300 || !json.Valid(env) || !strings.Contains(string(env), "[truncated: ") {
		t.Errorf("envelope %s", env)
	}
}

// TestSchemaCannotReadFiles: a $ref to a local file must not be followed, however valid the
// file (an ask_user schema comes from the model).
func TestSchemaCannotReadFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Spec{Name: "r", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file://` + path + `"}}}`)})
	assertDefinitionError(t, err, "r", "parameter schema does not compile")
	if _, err := CompileSchema("form", json.RawMessage(`{"$schema":"file://`+path+`"}`)); err == nil {
		t.Error("a $schema pointing at a file was loaded")
	}
}
