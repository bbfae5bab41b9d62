package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"parley/internal/fault"
	"strings"
	"testing"
	"time"
)

func noop(ctx context.Context, call Call, args map[string]any) (any, error) { return "done", nil }

// mustTool builds a tool the test expects New to accept.
func mustTool(t *testing.T, s Spec) *Tool {
	t.Helper()
	tool, err := New(s)
	if err != nil {
		t.Fatalf("New(%s): %v", s.Name, err)
	}
	return tool
}

func TestNewAccepts(t *testing.T) {
	cases := []Spec{
		{Name: "srv", Executor: Server, Func: noop},
		{Name: "gated_srv", Executor: Server, Approval: RequiresApproval, Approvers: ByReviewer, Func: noop},
		{Name: "gated_client", Executor: Client, Approval: RequiresApproval},
		{Name: "human", Executor: Human, ResponseSchema: json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}}}`)},
		{Name: "prov", Executor: Provider, Native: json.RawMessage(`{"type":"x_1","name":"prov"}`)},
		{Name: "prov_oa", Executor: Provider, Native: json.RawMessage(`{"type":"web_search"}`), NativeFormat: FormatOpenAI},
		{Name: "bounded", Executor: Server, Func: noop, MaxOutputBytes: MinOutputBytes, Timeout: time.Second, MaxAttempts: 3,
			Retention: Retention{MaxAgeTurns: 2, MaxCount: 1, NeverEvict: true}},
	}
	for _, s := range cases {
		t.Run(s.Name, func(t *testing.T) {
			tool := mustTool(t, s)
			if tool.Approval() == "" || tool.Approvers() == "" {
				t.Errorf("approval %q approvers %q: defaults not applied", tool.Approval(), tool.Approvers())
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	tool := mustTool(t, Spec{Name: "d", Executor: Server, Func: noop})
	if tool.Approval() != Auto || tool.Approvers() != ByOwner || tool.Gated() {
		t.Errorf("defaults: approval %q approvers %q gated %v", tool.Approval(), tool.Approvers(), tool.Gated())
	}
	if got := string(tool.Parameters()); got != `{"type":"object","properties":{}}` {
		t.Errorf("default parameters %s", got)
	}
	if tool.MaxAttempts() != 1 || tool.MaxOutputBytes() != DefaultMaxOutputBytes {
		t.Errorf("max attempts %d, max output %d", tool.MaxAttempts(), tool.MaxOutputBytes())
	}
	p := mustTool(t, Spec{Name: "web_search", Executor: Provider, Native: json.RawMessage(WebSearchNative)})
	if p.NativeFormat() != FormatAnthropic {
		t.Errorf("native format defaults to %q", p.NativeFormat())
	}
}

func TestNewCopiesItsInput(t *testing.T) {
	params := []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	tool := mustTool(t, Spec{Name: "c", Executor: Server, Func: noop, Parameters: params})
	copy(params, bytes.Repeat([]byte("x"), len(params)))
	if !json.Valid(tool.Parameters()) {
		t.Fatalf("the tool shares the caller's buffer: %s", tool.Parameters())
	}
}

// TestNewRefuses lists every definition rule: each case must fail with a DefinitionError that
// names the tool and says which rule.
func TestNewRefuses(t *testing.T) {
	obj := json.RawMessage(`{"type":"object","properties":{}}`)
	cases := []struct {
		name string
		spec Spec
		rule string
	}{
		{"empty name", Spec{Name: "", Executor: Server, Func: noop}, "name must be"},
		{"name with space", Spec{Name: "a b", Executor: Server, Func: noop}, "name must be"},
		{"name too long", Spec{Name: strings.Repeat("n", 65), Executor: Server, Func: noop}, "name must be"},
		{"bad executor", Spec{Name: "t", Executor: "robot", Func: noop}, `executor "robot" is not one of`},
		{"missing executor", Spec{Name: "t", Func: noop}, `executor "" is not one of`},
		{"bad approval", Spec{Name: "t", Executor: Server, Func: noop, Approval: "maybe"}, `approval "maybe" is not one of`},
		{"bad approvers", Spec{Name: "t", Executor: Server, Func: noop, Approvers: "anyone"}, `approvers "anyone" is not one of`},
		{"gated human", Spec{Name: "t", Executor: Human, Approval: RequiresApproval}, "a human tool cannot require approval"},
		{"gated provider", Spec{Name: "t", Executor: Provider, Approval: RequiresApproval, Native: json.RawMessage(`{"type":"x"}`)}, "a provider tool cannot require approval"},
		{"server without callback", Spec{Name: "t", Executor: Server}, "a server tool needs a callback"},
		{"human with callback", Spec{Name: "t", Executor: Human, Func: noop}, "a human tool must not have a callback"},
		{"client with callback", Spec{Name: "t", Executor: Client, Func: noop}, "a client tool must not have a callback"},
		{"client with precheck", Spec{Name: "t", Executor: Client, Precheck: func(context.Context, map[string]any) error { return nil }}, "a client tool must not have a precheck"},
		{"negative timeout", Spec{Name: "t", Executor: Server, Func: noop, Timeout: -time.Second}, "must not be negative"},
		{"negative attempts", Spec{Name: "t", Executor: Server, Func: noop, MaxAttempts: -1}, "must not be negative"},
		{"tiny output bound", Spec{Name: "t", Executor: Server, Func: noop, MaxOutputBytes: 10}, "max output bytes must be at least"},
		{"negative retention age", Spec{Name: "t", Executor: Server, Func: noop, Retention: Retention{MaxAgeTurns: -1}}, "retention limits"},
		{"negative retention count", Spec{Name: "t", Executor: Server, Func: noop, Retention: Retention{MaxCount: -2}}, "retention limits"},
		{"schema not JSON", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":`)}, "parameter schema does not compile"},
		{"schema not object", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`[1]`)}, "parameter schema does not compile"},
		{"schema bad keyword value", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"strin"}}}`)}, "parameter schema does not compile"},
		{"schema remote ref", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)}, "parameter schema does not compile"},
		{"schema remote metaschema", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"$schema":"file:///dev/zero","type":"object"}`)}, "parameter schema does not compile"},
		{"schema of a string", Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":"string"}`)}, `parameter schema must have "type": "object"`},
		{"result schema on server", Spec{Name: "t", Executor: Server, Func: noop, ResultSchema: obj}, "only a client tool has a result schema"},
		{"result schema broken", Spec{Name: "t", Executor: Client, ResultSchema: json.RawMessage(`{"minimum":"x"}`)}, "result schema does not compile"},
		{"response schema on client", Spec{Name: "t", Executor: Client, ResponseSchema: obj}, "only a human tool has a response schema"},
		{"response schema broken", Spec{Name: "t", Executor: Human, ResponseSchema: json.RawMessage(`{"required":3}`)}, "response schema does not compile"},
		{"native on server", Spec{Name: "t", Executor: Server, Func: noop, Native: json.RawMessage(`{"type":"x"}`)}, "only a provider tool has a native definition"},
		{"native not object", Spec{Name: "t", Executor: Provider, Native: json.RawMessage(`[1]`)}, "native definition must be a JSON object"},
		{"native without type", Spec{Name: "t", Executor: Provider, Native: json.RawMessage(`{"name":"t"}`)}, `native definition needs a "type"`},
		{"native other name", Spec{Name: "t", Executor: Provider, Native: json.RawMessage(`{"type":"x","name":"u"}`)}, "native definition names u"},
		{"native bad format", Spec{Name: "t", Executor: Provider, Native: json.RawMessage(`{"type":"x"}`), NativeFormat: "gemini"}, `native format "gemini"`},
		{"provider without native", Spec{Name: "t", Executor: Provider}, "a provider tool needs its native definition"},
		{"native format on server", Spec{Name: "t", Executor: Server, Func: noop, NativeFormat: FormatOpenAI}, "only a provider tool has a native format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.spec)
			assertDefinitionError(t, err, c.spec.Name, c.rule)
		})
	}
}

func assertDefinitionError(t *testing.T, err error, tool, rule string) {
	t.Helper()
	var de *DefinitionError
	if !errors.As(err, &de) {
		t.Fatalf("got %v, want a *DefinitionError", err)
	}
	if de.Tool != tool {
		t.Errorf("error names tool %q, want %q", de.Tool, tool)
	}
	if !strings.Contains(err.Error(), rule) {
		t.Errorf("error %q does not state the rule %q", err, rule)
	}
	if !strings.Contains(err.Error(), `tool "`+tool+`"`) {
		t.Errorf("error %q does not name the tool", err)
	}
}

func TestFromMap(t *testing.T) {
	m := map[string]any{
		"name": "lookup", "description": "Look up", "executor": "server", "approval": "requires_approval",
		"approvers": "reviewer", "streaming": true, "timeout_secs": 1.5, "max_attempts": float64(3),
		"max_output_bytes": json.Number("4096"),
		"parameters":       json.RawMessage(`{"type": "object",  "properties": {"q": {"type": "string"}}}`),
		"retention":        map[string]any{"max_age_turns": float64(2), "max_count": 5, "never_evict": true},
	}
	tool, err := FromMap(m, noop)
	if err != nil {
		t.Fatal(err)
	}
	if tool.Name() != "lookup" || tool.Description() != "Look up" || tool.Executor() != Server || !tool.Gated() ||
		tool.Approvers() != ByReviewer || !tool.Streaming() || tool.Timeout() != 1500*time.Millisecond ||
		tool.MaxAttempts() != 3 || tool.MaxOutputBytes() != 4096 ||
		tool.Retention() != (Retention{MaxAgeTurns: 2, MaxCount: 5, NeverEvict: true}) {
		t.Errorf("FromMap lost a field: %+v", tool.spec)
	}
	if string(tool.Parameters()) != `{"type": "object",  "properties": {"q": {"type": "string"}}}` {
		t.Errorf("raw parameters not kept verbatim: %s", tool.Parameters())
	}

	client, err := FromMap(map[string]any{
		"name": "pos", "executor": "client",
		"parameters":    map[string]any{"type": "object"},
		"result_schema": map[string]any{"type": "object", "required": []any{"x"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if client.ValidateResult(map[string]any{}) == nil {
		t.Error("result schema given as a map was not applied")
	}
	human, err := FromMap(map[string]any{"name": "q", "executor": "human", "response_schema": []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)}, nil)
	if err != nil || string(human.ResponseSchema()) == "" {
		t.Fatalf("human from map: %v", err)
	}
	prov, err := FromMap(map[string]any{"name": "web_search", "executor": "provider", "native": json.RawMessage(WebSearchNative), "native_format": "anthropic"}, nil)
	if err != nil || string(prov.Native()) != WebSearchNative {
		t.Fatalf("provider from map: %v", err)
	}
}

// TestFromMapRefuses: an unknown key or a wrong type is refused naming the tool and the key;
// the rules of New apply too.
func TestFromMapRefuses(t *testing.T) {
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "t", "executor": "server"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		m    map[string]any
		tool string
		rule string
	}{
		{"unknown key", base(map[string]any{"aproval": "auto"}), "t", `unknown key "aproval"`},
		{"two unknown keys", base(map[string]any{"zz": 1, "aa": 2}), "t", `unknown key "aa", "zz"`},
		{"unknown retention key", base(map[string]any{"retention": map[string]any{"forever": true}}), "t", `unknown key retention."forever"`},
		{"name not string", map[string]any{"name": 7, "executor": "server"}, "", `"name" must be a string, not a number`},
		{"description not string", base(map[string]any{"description": true}), "t", `"description" must be a string, not a boolean`},
		{"executor not string", base(map[string]any{"executor": []any{"server"}}), "t", `"executor" must be a string, not an array`},
		{"approval not string", base(map[string]any{"approval": nil}), "t", `"approval" must be a string, not null`},
		{"approvers not string", base(map[string]any{"approvers": 1}), "t", `"approvers" must be a string`},
		{"native_format not string", base(map[string]any{"native_format": 1}), "t", `"native_format" must be a string`},
		{"streaming not bool", base(map[string]any{"streaming": "yes"}), "t", `"streaming" must be a boolean, not a string`},
		{"max_attempts fractional", base(map[string]any{"max_attempts": 1.5}), "t", `"max_attempts" must be an integer`},
		{"max_attempts string", base(map[string]any{"max_attempts": "3"}), "t", `"max_attempts" must be an integer, not a string`},
		{"max_output_bytes huge", base(map[string]any{"max_output_bytes": 1e300}), "t", `"max_output_bytes" must be an integer`},
		{"timeout negative", base(map[string]any{"timeout_secs": -1}), "t", `"timeout_secs" must be a non-negative number`},
		{"timeout string", base(map[string]any{"timeout_secs": "30s"}), "t", `"timeout_secs" must be a non-negative number of seconds, not a string`},
		{"timeout NaN", base(map[string]any{"timeout_secs": math.NaN()}), "t", `"timeout_secs" must be a non-negative number`},
		{"parameters string", base(map[string]any{"parameters": `{"type":"object"}`}), "t", `"parameters" must be a JSON object, not a string`},
		{"parameters raw array", base(map[string]any{"parameters": json.RawMessage(`[]`)}), "t", `"parameters" must be a JSON object, not an array`},
		{"parameters raw broken", base(map[string]any{"parameters": json.RawMessage(`{`)}), "t", `"parameters" is not valid JSON`},
		{"parameters unencodable", base(map[string]any{"parameters": map[string]any{"x": math.Inf(1)}}), "t", `"parameters" cannot be encoded`},
		{"result_schema bool", base(map[string]any{"result_schema": true}), "t", `"result_schema" must be a JSON object`},
		{"response_schema number", base(map[string]any{"response_schema": 1}), "t", `"response_schema" must be a JSON object`},
		{"native array", base(map[string]any{"native": []any{}}), "t", `"native" must be a JSON object`},
		{"retention not object", base(map[string]any{"retention": 3}), "t", `"retention" must be an object, not a number`},
		{"retention age string", base(map[string]any{"retention": map[string]any{"max_age_turns": "2"}}), "t", `retention: "max_age_turns" must be an integer`},
		{"retention count fractional", base(map[string]any{"retention": map[string]any{"max_count": 0.5}}), "t", `retention: "max_count" must be an integer`},
		{"retention never_evict string", base(map[string]any{"retention": map[string]any{"never_evict": "yes"}}), "t", `retention: "never_evict" must be a boolean`},
		// New's rules still apply to a map declaration.
		{"bad executor", map[string]any{"name": "t", "executor": "robot"}, "t", `executor "robot"`},
		{"gated human", map[string]any{"name": "t", "executor": "human", "approval": "requires_approval"}, "t", "a human tool cannot require approval"},
		{"server without callback", map[string]any{"name": "t", "executor": "server"}, "t", "a server tool needs a callback"},
		{"bad schema", base(map[string]any{"parameters": map[string]any{"type": 5}}), "t", "parameter schema does not compile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fn := Func(noop)
			if c.name == "server without callback" {
				fn = nil
			}
			_, err := FromMap(c.m, fn)
			assertDefinitionError(t, err, c.tool, c.rule)
		})
	}
}

func TestPendingKind(t *testing.T) {
	tools := map[string]*Tool{
		"server":       mustTool(t, Spec{Name: "s", Executor: Server, Func: noop}),
		"gated server": mustTool(t, Spec{Name: "gs", Executor: Server, Func: noop, Approval: RequiresApproval}),
		"human":        mustTool(t, Spec{Name: "h", Executor: Human}),
		"client":       mustTool(t, Spec{Name: "c", Executor: Client}),
		"gated client": mustTool(t, Spec{Name: "gc", Executor: Client, Approval: RequiresApproval}),
		"provider":     WebSearch(),
	}
	cases := []struct {
		tool     string
		approved bool
		want     PendingKind
	}{
		{"server", false, ""},
		{"gated server", false, PendingApproval},
		{"gated server", true, ""},
		{"human", false, PendingElicitation},
		{"human", true, PendingElicitation},
		{"client", false, PendingClientExec},
		{"gated client", false, PendingApproval},  // first suspension: approval
		{"gated client", true, PendingClientExec}, // then the browser runs it
		{"provider", false, ""},
	}
	for _, c := range cases {
		if got := tools[c.tool].PendingKind(c.approved); got != c.want {
			t.Errorf("%s approved=%v: pending kind %q, want %q", c.tool, c.approved, got, c.want)
		}
	}
}

func problemsOf(t *testing.T, e *fault.Error) []map[string]any {
	t.Helper()
	if len(e.Problems) == 0 {
		t.Fatalf("no problems listed in %+v", e)
	}
	ps := make([]map[string]any, len(e.Problems))
	for i, p := range e.Problems {
		ps[i] = map[string]any{"path": p.Path, "message": p.Message}
	}
	return ps
}

func TestValidateArgs(t *testing.T) {
	tool := mustTool(t, Spec{Name: "v", Executor: Server, Func: noop, Parameters: json.RawMessage(`{
		"type":"object",
		"properties":{
			"name":{"type":"string","minLength":2},
			"age":{"type":"integer","minimum":0},
			"email":{"type":"string","format":"email"},
			"tags":{"type":"array","items":{"type":"string"}},
			"ratio":{"type":"number"}
		},
		"required":["name"],
		"additionalProperties":false}`)})
	cases := []struct {
		name  string
		raw   string
		paths []string // every problem's JSON path, sorted; nil means valid
	}{
		{"valid", `{"name":"Ada","age":36,"tags":["a"],"ratio":0.5}`, nil},
		{"empty is {}", ``, []string{""}},
		{"missing required", `{}`, []string{""}},
		{"every problem listed", `{"name":"A","age":-1,"email":"nope","tags":["ok",3]}`, []string{"/age", "/email", "/name", "/tags/1"}},
		{"integer checked exactly", `{"name":"Ada","age":1.5}`, []string{"/age"}},
		{"extra property", `{"name":"Ada","x":1}`, []string{""}},
		{"not an object", `[1,2]`, []string{""}},
		{"not JSON", `{"name":`, []string{""}},
		{"trailing brace", `{"name":"Ada"}}`, []string{""}},
		{"two values", `{"name":"Ada"} {}`, []string{""}},
		{"number out of range", `{"name":"Ada","ratio":1e400}`, []string{""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args, e := tool.ValidateArgs(json.RawMessage(c.raw))
			if c.paths == nil {
				if e != nil {
					t.Fatalf("unexpected error %v", e)
				}
				if args["age"] != int64(36) || args["ratio"] != 0.5 {
					t.Errorf("numbers not normalized: %#v", args)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted %s", c.raw)
			}
			if e.Kind != fault.KindInvalidArgs {
				t.Errorf("kind %q", e.Kind)
			}
			var paths []string
			for _, p := range problemsOf(t, e) {
				paths = append(paths, p["path"].(string))
				if p["message"].(string) == "" {
					t.Errorf("problem at %q has no message", p["path"])
				}
				shown := p["path"].(string)
				if shown == "" {
					shown = "/"
				}
				if !strings.Contains(e.Message, shown) && len(c.paths) > 1 {
					t.Errorf("message %q does not list %q", e.Message, shown)
				}
			}
			if strings.Join(paths, ",") != strings.Join(c.paths, ",") {
				t.Errorf("problem paths %q, want %q", paths, c.paths)
			}
		})
	}
}

func TestValidateValueRecoversFromValidatorPanic(t *testing.T) {
	tool := mustTool(t, Spec{Name: "v", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)})
	e := ValidateValue(tool.params, map[string]any{"x": struct{}{}}, "arguments")
	if e == nil || e.Kind != fault.KindInvalidArgs {
		t.Fatalf("a non-JSON value: %v", e)
	}
}

func TestValidateResult(t *testing.T) {
	g := Geolocation()
	cases := []struct {
		name  string
		v     any
		paths []string
	}{
		{"valid", map[string]any{"latitude": 48.85, "longitude": 2.35, "accuracy": int64(20)}, nil},
		{"out of range", map[string]any{"latitude": 91.0, "longitude": -181.0, "accuracy": -1.0}, []string{"/accuracy", "/latitude", "/longitude"}},
		{"missing", map[string]any{"latitude": 1.0}, []string{""}},
		{"not numbers", map[string]any{"latitude": "1", "longitude": true, "accuracy": nil}, []string{"/accuracy", "/latitude", "/longitude"}},
		{"extra field", map[string]any{"latitude": 1.0, "longitude": 1.0, "accuracy": 1.0, "admin": true}, []string{""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := g.ValidateResult(c.v)
			if c.paths == nil {
				if e != nil {
					t.Fatal(e)
				}
				return
			}
			if e == nil {
				t.Fatal("accepted")
			}
			var paths []string
			for _, p := range problemsOf(t, e) {
				paths = append(paths, p["path"].(string))
			}
			if strings.Join(paths, ",") != strings.Join(c.paths, ",") {
				t.Errorf("paths %q, want %q", paths, c.paths)
			}
		})
	}
	if Echo().ValidateResult("anything") != nil {
		t.Error("a tool without a result schema refused a result")
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := DecodeJSON([]byte(` {"a":[1,2.5,{"b":9007199254740993}]} `))
	if err != nil {
		t.Fatal(err)
	}
	a := v.(map[string]any)["a"].([]any)
	if a[0] != int64(1) || a[1] != 2.5 || a[2].(map[string]any)["b"] != int64(9007199254740993) {
		t.Errorf("decoded %#v", v)
	}
	for _, bad := range []string{`{}x`, `[]]`, `1e999`, `[-1e999]`, `{"a":1e999}`, ``} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("DecodeJSON(%q) accepted", bad)
		}
	}
}

// decodeEnvelope parses an envelope and checks its shape.
func decodeEnvelope(t *testing.T, b json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("envelope %s is not JSON: %v", b, err)
	}
	return m
}

func TestEnvelopes(t *testing.T) {
	cases := []struct {
		name string
		got  json.RawMessage
		want string
	}{
		{"ok", OKEnvelope(map[string]any{"n": 1}), `{"ok":true,"result":{"n":1}}`},
		{"ok nil result", OKEnvelope(nil), `{"ok":true,"result":{}}`},
		{"ok false result kept", OKEnvelope(false), `{"ok":true,"result":false}`},
		{"ok html not escaped", OKEnvelope("<b>&</b>"), `{"ok":true,"result":"<b>&</b>"}`},
		{"ok unencodable", OKEnvelope(math.NaN()), `{"ok":false,"error":{"details":{},"kind":"internal","message":"the tool's result could not be encoded"}}`},
		{"error", ErrorEnvelope(fault.New(fault.KindNotFound, "no such city", map[string]any{"city": "X"})), `{"ok":false,"error":{"details":{"city":"X"},"kind":"not_found","message":"no such city"}}`},
		{"error without details", ErrorEnvelope(fault.Errorf(fault.KindTimeout, "slow %d", 3)), `{"ok":false,"error":{"details":{},"kind":"timeout","message":"slow 3"}}`},
		{"error unencodable details", ErrorEnvelope(fault.New(fault.KindNotFound, "m", map[string]any{"f": func() {}})), `{"ok":false,"error":{"details":{},"kind":"not_found","message":"m"}}`},
		{"nil error", ErrorEnvelope(nil), `{"ok":false,"error":{"details":{},"kind":"internal","message":"internal error"}}`},
	}
	for _, c := range cases {
		if string(c.got) != c.want {
			t.Errorf("%s: got %s, want %s", c.name, c.got, c.want)
		}
	}
	if (Outcome{Status: ToolError}).Envelope(0) == nil {
		t.Error("an error outcome without an error has no envelope")
	}
}

func TestErrorIsAndMap(t *testing.T) {
	err := error(fault.Errorf(fault.KindStale, "call %s is not pending", "c1"))
	if !errors.Is(err, &fault.Error{Kind: fault.KindStale}) || errors.Is(err, &fault.Error{Kind: fault.KindConflict}) {
		t.Error("errors.Is by kind")
	}
	if !errors.Is(err, fault.Errorf(fault.KindStale, "call c1 is not pending")) || errors.Is(err, fault.Errorf(fault.KindStale, "other")) {
		t.Error("errors.Is by kind and message")
	}
	if err.Error() != "stale: call c1 is not pending" {
		t.Errorf("Error() = %q", err.Error())
	}
	if errors.Is(err, errors.New("stale")) {
		t.Error("matched a plain error")
	}
}

// outcomeTool runs fn as a server callback through Execute.
func outcomeTool(t *testing.T, fn Func) *Tool {
	return mustTool(t, Spec{Name: "o", Executor: Server, Func: fn})
}

// TestExecuteOutcomes covers the three outcomes of running a tool and what the model sees of each.
func TestExecuteOutcomes(t *testing.T) {
	secret := "password=hunter2"
	cases := []struct {
		name      string
		fn        Func
		status    OutcomeStatus
		kind      fault.Kind
		retryable bool
	}{
		{"success", func(ctx context.Context, c Call, a map[string]any) (any, error) { return map[string]any{"x": 1}, nil }, OK, "", false},
		{"tool error", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			return nil, fault.New(fault.KindNoMatch, "City not found", nil)
		}, ToolError, fault.KindNoMatch, false},
		{"wrapped tool error", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			return nil, errors.Join(errors.New("ctx"), &fault.Error{Kind: fault.KindHTTPError, Message: "503", Retryable: true})
		}, ToolError, fault.KindHTTPError, true},
		{"internal error", func(ctx context.Context, c Call, a map[string]any) (any, error) { return nil, errors.New(secret) }, Internal, fault.KindInternal, false},
		{"panic", func(ctx context.Context, c Call, a map[string]any) (any, error) { panic(secret) }, Internal, fault.KindInternal, false},
		{"callback's internal kind stays hidden", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			return nil, fault.New(fault.KindInternal, secret, nil)
		}, Internal, fault.KindInternal, false},
		{"nil *fault.Error", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			var e *fault.Error
			return nil, e
		}, Internal, fault.KindInternal, false},
		{"unencodable result", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			return map[string]any{secret: math.Inf(1)}, nil
		}, Internal, fault.KindInternal, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			out := outcomeTool(t, c.fn).Execute(context.Background(), Call{ToolCallID: "call_1", Logger: logger}, nil)
			if out.Status != c.status {
				t.Fatalf("status %q, want %q (%+v)", out.Status, c.status, out)
			}
			if out.Retryable() != c.retryable {
				t.Errorf("retryable %v", out.Retryable())
			}
			env := out.Envelope(0)
			m := decodeEnvelope(t, env)
			if (m["ok"] == true) != (c.status == OK) {
				t.Errorf("envelope ok flag wrong: %s", env)
			}
			if c.status == OK {
				return
			}
			if out.Err.Kind != c.kind {
				t.Errorf("kind %q, want %q", out.Err.Kind, c.kind)
			}
			if c.status != Internal {
				return
			}
			if !strings.HasPrefix(out.Ref, "ref_") || len(out.Ref) != 16 {
				t.Errorf("reference %q", out.Ref)
			}
			if strings.Contains(string(env), "hunter2") || strings.Contains(out.Err.Message, "hunter2") {
				t.Errorf("internal message leaked to the model: %s", env)
			}
			if !strings.Contains(string(env), out.Ref) {
				t.Errorf("envelope %s lacks the reference %s", env, out.Ref)
			}
			if !strings.Contains(logs.String(), out.Ref) {
				t.Errorf("log lacks the reference: %s", logs.String())
			}
			if c.name != "unencodable result" && !strings.Contains(logs.String(), "hunter2") && c.name != "nil *fault.Error" {
				t.Errorf("log lacks the cause: %s", logs.String())
			}
			if out.Cause == nil {
				t.Error("no cause kept for the log")
			}
		})
	}
}

func TestExecuteTimeoutIsRetryable(t *testing.T) {
	cases := []struct {
		name string
		fn   Func
	}{
		{"returns ctx.Err", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}},
		{"returns an unwrapped I/O error after the deadline", func(ctx context.Context, c Call, a map[string]any) (any, error) {
			<-ctx.Done()
			return nil, errors.New("read tcp: i/o timeout")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now()) // already expired: no waiting
			defer cancel()
			out := outcomeTool(t, c.fn).Execute(ctx, Call{}, nil)
			if out.Status != ToolError || out.Err.Kind != fault.KindTimeout || !out.Retryable() {
				t.Fatalf("outcome %+v, want a retryable timeout tool error", out)
			}
		})
	}
	// A cancellation (shutdown) is not a timeout: it is internal, its cause kept for the caller.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := outcomeTool(t, cases[0].fn).Execute(ctx, Call{}, nil)
	if out.Status != Internal || !errors.Is(out.Cause, context.Canceled) {
		t.Errorf("cancelled: %+v", out)
	}
}

func TestExecuteGivesTheCallbackItsCall(t *testing.T) {
	var got Call
	tool := outcomeTool(t, func(ctx context.Context, c Call, a map[string]any) (any, error) {
		got = c
		c.Progress("half way") // never nil
		c.Logger.Info("logged")
		return nil, nil
	})
	out := tool.Execute(context.Background(), Call{ConversationID: "conv", ToolCallID: "call_9", UserID: "u1", Attempt: 2}, map[string]any{})
	if out.Status != OK || string(out.Envelope(0)) != `{"ok":true,"result":{}}` {
		t.Fatalf("outcome %+v", out)
	}
	if got.ConversationID != "conv" || got.ToolCallID != "call_9" || got.UserID != "u1" || got.Attempt != 2 || got.Logger == nil || got.Progress == nil {
		t.Errorf("call context %+v", got)
	}
	notServer := AskUser().Execute(context.Background(), Call{}, nil)
	if notServer.Status != ToolError || notServer.Err.Kind != fault.KindUnknownTool {
		t.Errorf("executing a human tool: %+v", notServer)
	}
}

func TestDryRun(t *testing.T) {
	ran := false
	plain := outcomeTool(t, func(ctx context.Context, c Call, a map[string]any) (any, error) { ran = true; return nil, nil })
	cases := []struct {
		name    string
		tool    *Tool
		summary string
	}{
		{"server default", plain, "Would run o on the server"},
		{"human default", AskUser(), "Would ask you a question (ask_user)"},
		{"client default", Geolocation(), "Would run geolocation in your browser"},
		{"provider default", WebSearch(), "Would let the model provider run web_search"},
	}
	args := map[string]any{"k": "v"}
	for _, c := range cases {
		plan, err := c.tool.DryRun(context.Background(), Call{}, args)
		if err != nil || plan.Summary != c.summary {
			t.Errorf("%s: plan %+v err %v", c.name, plan, err)
		}
		if plan.Details["tool"] != c.tool.Name() || plan.Details["arguments"].(map[string]any)["k"] != "v" {
			t.Errorf("%s: details %+v", c.name, plan.Details)
		}
		if c.tool.HasDryRun() {
			t.Errorf("%s: reports a dry run of its own", c.name)
		}
	}
	if ran {
		t.Error("a dry run ran the callback")
	}
	var sawDryRun bool
	custom := mustTool(t, Spec{Name: "c", Executor: Server, Func: noop, DryRun: func(ctx context.Context, c Call, a map[string]any) (Plan, error) {
		sawDryRun = c.DryRun
		c.Progress("no-op")
		return Plan{Summary: "custom"}, nil
	}})
	if p, err := custom.DryRun(context.Background(), Call{}, nil); err != nil || p.Summary != "custom" || !sawDryRun || !custom.HasDryRun() {
		t.Errorf("custom plan %+v err %v dry-run flag %v", p, err, sawDryRun)
	}
	panicky := mustTool(t, Spec{Name: "p", Executor: Server, Func: noop, DryRun: func(ctx context.Context, c Call, a map[string]any) (Plan, error) {
		panic("boom")
	}})
	if _, err := panicky.DryRun(context.Background(), Call{}, nil); err == nil || !strings.Contains(err.Error(), "panic in dry run of p") {
		t.Errorf("panicking dry run: %v", err)
	}
}

func TestDefinitionErrorUnwraps(t *testing.T) {
	_, err := New(Spec{Name: "t", Executor: Server, Func: noop, Parameters: json.RawMessage(`{"type":`)})
	var de *DefinitionError
	if !errors.As(err, &de) || errors.Unwrap(err) == nil {
		t.Fatalf("cause not kept: %v", err)
	}
}

func TestCompileSchemaKeepsCompiledSchemas(t *testing.T) {
	raw := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`)
	a, err := CompileSchema("cache-test", raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := CompileSchema("cache-test", raw)
	if err != nil || a != b {
		t.Fatalf("second compile of the same schema: %p, %v; want the first, %p", b, err, a)
	}
	if c, _ := CompileSchema("other-label", raw); c == a {
		t.Fatal("a schema compiled under another label was shared: its errors would name the wrong tool")
	}
	if err := a.Validate(map[string]any{"n": json.Number("0")}); err == nil {
		t.Fatal("the cached schema accepted n = 0")
	}
	if _, err := CompileSchema("cache-test", json.RawMessage(`{"type":"object","properties":{"n":{"type":"nope"}}}`)); err == nil {
		t.Fatal("a schema that does not compile was accepted")
	}

	// Full: the cache stays at its bound.
	for i := range maxCachedSchemas + 10 {
		if _, err := CompileSchema("cache-test", json.RawMessage(fmt.Sprintf(`{"type":"object","title":"%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	compiledSchemas.mu.Lock()
	n := len(compiledSchemas.m)
	compiledSchemas.mu.Unlock()
	if n > maxCachedSchemas {
		t.Fatalf("cache holds %d schemas, bound %d", n, maxCachedSchemas)
	}
	big := json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", maxCachedSchemaBytes) + `"}`)
	if _, err := CompileSchema("cache-test", big); err != nil {
		t.Fatal(err)
	}
	compiledSchemas.mu.Lock()
	_, kept := compiledSchemas.m["cache-test\x00"+string(big)]
	compiledSchemas.mu.Unlock()
	if kept {
		t.Fatal("a schema over the size bound was kept")
	}
}

// TestCallKey: a call's key is stable for one call and differs for any other, including calls
// whose ids only differ in where the conversation id ends.
func TestCallKey(t *testing.T) {
	k := Call{ConversationID: "c1", ToolCallID: "call_0", Attempt: 1}.Key()
	if again := (Call{ConversationID: "c1", ToolCallID: "call_0", Attempt: 7}).Key(); again != k {
		t.Fatalf("the key changed across attempts: %s / %s", k, again)
	}
	seen := map[string]Call{}
	for _, c := range []Call{{ConversationID: "c1", ToolCallID: "call_0"}, {ConversationID: "c2", ToolCallID: "call_0"},
		{ConversationID: "a", ToolCallID: "bc"}, {ConversationID: "ab", ToolCallID: "c"}, {ConversationID: "", ToolCallID: "abc"}} {
		key := c.Key()
		if prev, dup := seen[key]; dup {
			t.Fatalf("%+v and %+v share the key %s", prev, c, key)
		}
		if len(key) != 35 || key[:3] != "pc_" {
			t.Fatalf("key %q: want pc_ and 32 hex digits", key)
		}
		seen[key] = c
	}
}
