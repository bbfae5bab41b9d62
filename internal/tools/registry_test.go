package tools

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Internal errors are logged on slog's default logger when a call has none; keep test
	// output readable.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	goleak.VerifyTestMain(m)
}

func TestRegistryRefusesDuplicateNames(t *testing.T) {
	a := mustTool(t, Spec{Name: "dup", Executor: Server, Func: noop})
	b := mustTool(t, Spec{Name: "dup", Executor: Client})
	cases := []struct {
		name  string
		build func() error
	}{
		{"NewRegistry", func() error { _, err := NewRegistry(a, b); return err }},
		{"Add", func() error {
			r, err := NewRegistry(a)
			if err != nil {
				return err
			}
			return r.Add(b)
		}},
		{"zero Registry", func() error {
			var r Registry
			if err := r.Add(a); err != nil {
				t.Fatalf("first Add on a zero registry: %v", err)
			}
			return r.Add(b)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertDefinitionError(t, c.build(), "dup", "duplicate name in registry")
		})
	}
	var r Registry
	if err := r.Add(nil); err == nil {
		t.Error("a nil tool was registered")
	}
}

func TestRegistryLookupAndOrder(t *testing.T) {
	r, err := NewRegistry(Builtins(BuiltinDeps{Outbox: &memOutbox{}, TestTools: true})...)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range r.All() {
		names = append(names, tool.Name())
	}
	want := "get_current_time,echo,failing,ask_user,geolocation,send_email,count_down,deploy,web_search"
	if strings.Join(names, ",") != want {
		t.Errorf("order %v", names)
	}
	if tool, ok := r.Get("echo"); !ok || tool.Name() != "echo" {
		t.Error("Get(echo)")
	}
	if _, ok := r.Get("nope"); ok {
		t.Error("Get found an unknown tool")
	}
	all := r.All()
	all[0] = nil
	if r.All()[0] == nil {
		t.Error("All exposes the registry's slice")
	}
}

// weirdSchema has whitespace, key order and characters json.Marshal would change.
const weirdSchema = "{\n  \"type\": \"object\",\n  \"properties\": {\"q\": {\"type\": \"string\", \"description\": \"<b>&amp;</b> \\u00e9\"}},\n  \"required\": [\"q\"]\n}"

// TestExportsKeepSchemaVerbatim: the parameter schema reaches both providers byte for byte,
// and each provider gets only the provider tools of its own format.
func TestExportsKeepSchemaVerbatim(t *testing.T) {
	srv := mustTool(t, Spec{Name: "search_docs", Description: `Find "docs" <fast>`, Executor: Server, Func: noop, Parameters: json.RawMessage(weirdSchema)})
	human := AskUser()
	anth := WebSearch()
	oa := mustTool(t, Spec{Name: "oa_search", Executor: Provider, Native: json.RawMessage(`{"type": "web_search_preview"}`), NativeFormat: FormatOpenAI})
	r, err := NewRegistry(srv, human, anth, oa)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		format  string
		got     []json.RawMessage
		schemaP func(m map[string]json.RawMessage) json.RawMessage
		native  string
	}{
		{FormatOpenAI, r.OpenAITools(), func(m map[string]json.RawMessage) json.RawMessage {
			var fn map[string]json.RawMessage
			if err := json.Unmarshal(m["function"], &fn); err != nil {
				t.Fatal(err)
			}
			if string(fn["name"]) != `"search_docs"` && string(fn["name"]) != `"ask_user"` {
				t.Errorf("openai name %s", fn["name"])
			}
			if string(m["type"]) != `"function"` {
				t.Errorf("openai type %s", m["type"])
			}
			return fn["parameters"]
		}, `{"type": "web_search_preview"}`},
		{FormatAnthropic, r.AnthropicTools(), func(m map[string]json.RawMessage) json.RawMessage { return m["input_schema"] }, WebSearchNative},
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			if len(c.got) != 3 {
				t.Fatalf("%d definitions, want 2 functions and this format's provider tool: %s", len(c.got), c.got)
			}
			for i, def := range c.got[:2] {
				if !json.Valid(def) {
					t.Fatalf("definition %s is not JSON", def)
				}
				var m map[string]json.RawMessage
				if err := json.Unmarshal(def, &m); err != nil {
					t.Fatal(err)
				}
				want := []string{weirdSchema, askUserParameters}[i]
				// The schema must appear in the definition's bytes unchanged, not merely
				// decode to the same value.
				if !strings.Contains(string(def), want) {
					t.Errorf("schema not verbatim in %s", def)
				}
				if got := c.schemaP(m); !json.Valid(got) {
					t.Errorf("schema field %s", got)
				}
			}
			if string(c.got[2]) != c.native {
				t.Errorf("provider tool exported as %s, want %s", c.got[2], c.native)
			}
			if exp := r.Export(c.format); len(exp) != len(c.got) || string(exp[0]) != string(c.got[0]) {
				t.Errorf("Export(%q) differs", c.format)
			}
		})
	}
	if !strings.Contains(string(r.OpenAITools()[0]), `"description":"Find \"docs\" <fast>"`) {
		t.Errorf("description: %s", r.OpenAITools()[0])
	}
	if got := r.Export("demo"); len(got) != 3 || !strings.Contains(string(got[0]), `"type":"function"`) {
		t.Errorf("the demo format gets the OpenAI export: %s", got)
	}
}

// TestExportFollowsChanges: the definitions are built once and shared, and a change of the
// tools (Add, or a dynamic source replacing its own) is in the next export of either format.
func TestExportFollowsChanges(t *testing.T) {
	r, err := NewRegistry(mustTool(t, Spec{Name: "a", Executor: Server, Func: noop}))
	if err != nil {
		t.Fatal(err)
	}
	names := func(defs []json.RawMessage) string {
		var out []string
		for _, d := range defs {
			var v struct {
				Name     string `json:"name"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(d, &v); err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			out = append(out, v.Name+v.Function.Name)
		}
		return strings.Join(out, ",")
	}
	check := func(want string) {
		t.Helper()
		for _, f := range []string{FormatOpenAI, FormatAnthropic} {
			if got := names(r.Export(f)); got != want {
				t.Errorf("%s: %s, want %s", f, got, want)
			}
		}
	}
	check("a")
	first := r.OpenAITools()
	first[0] = nil // the caller's slice: the registry's copy is untouched
	check("a")
	if err := r.Add(mustTool(t, Spec{Name: "b", Executor: Server, Func: noop})); err != nil {
		t.Fatal(err)
	}
	check("a,b")
	if err := r.SetSource("mcp", []*Tool{mustTool(t, Spec{Name: "c", Executor: Server, Func: noop})}); err != nil {
		t.Fatal(err)
	}
	check("a,b,c")
	if err := r.SetSource("mcp", []*Tool{mustTool(t, Spec{Name: "d", Executor: Server, Func: noop})}); err != nil {
		t.Fatal(err)
	}
	check("a,b,d")
}
