package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
)

// memOutbox is an Outbox with the store's contract: idempotent on the tool_call_id.
type memOutbox struct {
	mu    sync.Mutex
	byKey map[string]string
	msgs  []Email
	fail  error
}

func (o *memOutbox) Send(ctx context.Context, call Call, msg Email) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail != nil {
		return "", o.fail
	}
	if o.byKey == nil {
		o.byKey = map[string]string{}
	}
	if id, ok := o.byKey[call.ToolCallID]; ok {
		return id, nil
	}
	id := fmt.Sprintf("out_%d", len(o.msgs)+1)
	o.byKey[call.ToolCallID] = id
	o.msgs = append(o.msgs, msg)
	return id, nil
}

// run validates raw arguments and executes tool, as the agent does.
func run(t *testing.T, tool *Tool, call Call, raw string) Outcome {
	t.Helper()
	args, e := tool.ValidateArgs(json.RawMessage(raw))
	if e != nil {
		return Outcome{Status: ToolError, Err: e}
	}
	return tool.Execute(context.Background(), call, args)
}

func TestBuiltinDeclarations(t *testing.T) {
	ts := map[string]*Tool{}
	for _, tool := range Builtins(BuiltinDeps{Outbox: &memOutbox{}, TestTools: true}) {
		ts[tool.Name()] = tool
	}
	cases := []struct {
		name      string
		executor  Executor
		gated     bool
		streaming bool
		pending   PendingKind
	}{
		{"get_current_time", Server, false, false, ""},
		{"echo", Server, false, false, ""},
		{"failing", Server, false, false, ""},
		{"ask_user", Human, false, false, PendingElicitation},
		{"geolocation", Client, false, false, PendingClientExec},
		{"send_email", Server, true, false, PendingApproval},
		{"count_down", Server, false, true, ""},
		{"deploy", Server, true, false, PendingApproval},
		{"web_search", Provider, false, false, ""},
	}
	for _, c := range cases {
		tool, ok := ts[c.name]
		if !ok {
			t.Errorf("%s missing", c.name)
			continue
		}
		if tool.Executor() != c.executor || tool.Gated() != c.gated || tool.Streaming() != c.streaming || tool.PendingKind(false) != c.pending {
			t.Errorf("%s: executor %s gated %v streaming %v pending %q", c.name, tool.Executor(), tool.Gated(), tool.Streaming(), tool.PendingKind(false))
		}
		if tool.Description() == "" {
			t.Errorf("%s has no description", c.name)
		}
	}
	if ts["send_email"].Approvers() != ByOwner {
		t.Error("send_email approvers")
	}
	if ts["deploy"].Approvers() != ByReviewer {
		t.Error("deploy approvers: the demo's reviewer-gated tool must wait for a reviewer")
	}
	if len(ts) != len(cases) {
		t.Errorf("%d built-ins, want %d", len(ts), len(cases))
	}
	for _, tool := range Builtins(BuiltinDeps{TestTools: true}) {
		if tool.Name() == "send_email" {
			t.Error("send_email registered without an outbox")
		}
	}
}

func TestGetCurrentTime(t *testing.T) {
	at := time.Date(2026, 3, 1, 14, 30, 5, 0, time.UTC)
	tool := GetCurrentTime(clock.NewFake(at))
	cases := []struct {
		args     string
		wantTime any
		wantZone string
	}{
		{`{}`, "2026-03-01T14:30:05Z", "UTC"},
		{`{"format":"iso8601","timezone":"Europe/Paris"}`, "2026-03-01T15:30:05+01:00", "Europe/Paris"},
		{`{"format":"unix"}`, at.Unix(), "UTC"},
		{`{"format":"unix","timezone":"Asia/Tokyo"}`, at.Unix(), "Asia/Tokyo"},
		{`{"format":"human","timezone":"America/New_York"}`, "Sunday, 1 March 2026, 09:30:05 EST", "America/New_York"},
	}
	for _, c := range cases {
		out := run(t, tool, Call{}, c.args)
		if out.Status != OK {
			t.Errorf("%s: %+v", c.args, out.Err)
			continue
		}
		res := out.Result.(map[string]any)
		if res["time"] != c.wantTime || res["timezone"] != c.wantZone {
			t.Errorf("%s: got %v", c.args, res)
		}
	}
	for _, bad := range []string{`{"timezone":"Mars/Olympus"}`, `{"timezone":"Local"}`, `{"timezone":"../../etc/passwd"}`, `{"timezone":" UTC"}`} {
		out := run(t, tool, Call{}, bad)
		if out.Status != ToolError || out.Err.Kind != fault.KindInvalidArgs {
			t.Errorf("%s: %+v, want an invalid_args tool error", bad, out)
			continue
		}
		if ps := problemsOf(t, out.Err); ps[0]["path"] != "/timezone" {
			t.Errorf("%s: problem path %v", bad, ps[0]["path"])
		}
	}
	if out := run(t, tool, Call{}, `{"format":"rfc822"}`); out.Status != ToolError || out.Err.Kind != fault.KindInvalidArgs {
		t.Errorf("a bad format was accepted: %+v", out)
	}
}

func TestEcho(t *testing.T) {
	out := run(t, Echo(), Call{}, `{"text":"héllo <world>"}`)
	if string(out.Envelope(0)) != `{"ok":true,"result":{"text":"héllo <world>"}}` {
		t.Errorf("echo: %s", out.Envelope(0))
	}
	if out := run(t, Echo(), Call{}, `{}`); out.Status != ToolError || out.Err.Kind != fault.KindInvalidArgs {
		t.Errorf("echo without text: %+v", out)
	}
}

func TestFailing(t *testing.T) {
	cases := []struct {
		args      string
		retryable bool
		message   string
	}{
		{`{}`, false, "this tool always fails"},
		{`{"message":"disk full"}`, false, "disk full"},
		{`{"retryable":true}`, true, "this tool always fails"},
		{`{"retryable":false}`, false, "this tool always fails"},
	}
	for _, c := range cases {
		out := run(t, Failing(), Call{Attempt: 2}, c.args)
		if out.Status != ToolError || out.Err.Kind != fault.KindCommandFailed || out.Err.Message != c.message || out.Retryable() != c.retryable {
			t.Errorf("%s: %+v", c.args, out.Err)
		}
	}
	if Failing().MaxAttempts() < 2 {
		t.Error("failing allows no retry, so the scheduler cannot be shown")
	}
}

func TestAskUser(t *testing.T) {
	tool := AskUser()
	raw := `{"message":"Which plan?","schema":{"type":"object","properties":{
		"plan":{"type":"string","enum":["free","pro"],"default":"pro"},
		"seats":{"type":"integer","minimum":1},
		"email":{"type":"string","format":"email"},
		"annual":{"type":"boolean"}},"required":["plan","email"]}}`
	args, e := tool.ValidateArgs(json.RawMessage(raw))
	if e != nil {
		t.Fatal(e)
	}
	p, e := tool.Elicitation(args)
	if e != nil {
		t.Fatal(e)
	}
	if p.Message != "Which plan?" || !json.Valid(p.Schema) {
		t.Fatalf("prompt %+v", p)
	}
	answers := []struct {
		name  string
		v     map[string]any
		paths []string
	}{
		{"valid", map[string]any{"plan": "pro", "seats": int64(3), "email": "a@b.co", "annual": true}, nil},
		{"every problem", map[string]any{"plan": "gold", "seats": int64(0), "email": "nope"}, []string{"/email", "/plan", "/seats"}},
		{"missing required", map[string]any{"annual": false}, []string{""}},
	}
	for _, a := range answers {
		e := tool.ValidateAnswer(p, a.v)
		if a.paths == nil {
			if e != nil {
				t.Errorf("%s: %v", a.name, e)
			}
			continue
		}
		if e == nil {
			t.Errorf("%s: accepted", a.name)
			continue
		}
		var paths []string
		for _, pr := range problemsOf(t, e) {
			paths = append(paths, pr["path"].(string))
		}
		if strings.Join(paths, ",") != strings.Join(a.paths, ",") {
			t.Errorf("%s: paths %q want %q", a.name, paths, a.paths)
		}
	}
	// The parameter schema already turns away what the model cannot send.
	for _, bad := range []string{
		`{"message":"q"}`,
		`{"message":"","schema":{"type":"object","properties":{"a":{"type":"string"}}}}`,
		`{"message":"q","schema":{"type":"object","properties":{"a":{"type":"array"}}}}`,
	} {
		if _, e := tool.ValidateArgs(json.RawMessage(bad)); e == nil {
			t.Errorf("ask_user accepted %s", bad)
		}
	}
	// What the parameter schema cannot express, Elicitation refuses.
	if _, e := tool.Elicitation(map[string]any{"message": "q", "schema": map[string]any{
		"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number", "format": "email"}}}}); e == nil {
		t.Error("a number with a format passed")
	}
	if _, e := tool.Elicitation(map[string]any{"message": "q"}); e == nil || e.Kind != fault.KindInvalidArgs {
		t.Errorf("a question without a schema: %v", e)
	}
}

func TestElicitationWithResponseSchema(t *testing.T) {
	tool := mustTool(t, Spec{Name: "confirm_address", Description: "Confirm your address", Executor: Human,
		ResponseSchema: json.RawMessage(`{"type":"object","properties":{"street":{"type":"string","minLength":1}},"required":["street"]}`)})
	p, e := tool.Elicitation(map[string]any{})
	if e != nil || p.Message != "Confirm your address" || string(p.Schema) != string(tool.ResponseSchema()) {
		t.Fatalf("prompt %+v %v", p, e)
	}
	if p, _ := tool.Elicitation(map[string]any{"question": "Where?"}); p.Message != "Where?" {
		t.Errorf("question argument ignored: %+v", p)
	}
	if tool.ValidateAnswer(p, map[string]any{"street": "Main St"}) != nil || tool.ValidateAnswer(p, map[string]any{}) == nil {
		t.Error("answers not validated against the response schema")
	}
	if _, e := Echo().Elicitation(nil); e == nil {
		t.Error("a server tool asked a question")
	}
	if e := AskUser().ValidateAnswer(Prompt{Schema: json.RawMessage(`{"type":`)}, map[string]any{}); e == nil {
		t.Error("a broken prompt schema validated an answer")
	}
}

func TestGeolocation(t *testing.T) {
	g := Geolocation()
	for _, ok := range []string{`{}`, `{"high_accuracy":true}`} {
		if _, e := g.ValidateArgs(json.RawMessage(ok)); e != nil {
			t.Errorf("%s: %v", ok, e)
		}
	}
	if _, e := g.ValidateArgs(json.RawMessage(`{"high_accuracy":"yes"}`)); e == nil {
		t.Error("high_accuracy must be a boolean")
	}
	var rs map[string]any
	if err := json.Unmarshal(g.ResultSchema(), &rs); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rs["required"]) != "[latitude longitude accuracy]" {
		t.Errorf("required %v", rs["required"])
	}
}

func TestSendEmail(t *testing.T) {
	ob := &memOutbox{}
	tool := SendEmail(ob)
	raw := `{"to":"ada@example.com","subject":"Hello","body":"Line one\nLine two"}`
	args, e := tool.ValidateArgs(json.RawMessage(raw))
	if e != nil {
		t.Fatal(e)
	}

	// The dry run shows the whole message and writes nothing.
	plan, err := tool.DryRun(context.Background(), Call{ToolCallID: "call_1"}, args)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Details["to"] != "ada@example.com" || plan.Details["subject"] != "Hello" || plan.Details["body"] != "Line one\nLine two" ||
		!strings.Contains(plan.Summary, "ada@example.com") || !tool.HasDryRun() {
		t.Errorf("plan %+v", plan)
	}
	if out := tool.Execute(context.Background(), Call{ToolCallID: "call_1", DryRun: true}, args); out.Status != OK || len(ob.msgs) != 0 {
		t.Errorf("Execute in dry-run mode wrote to the outbox: %+v", out)
	}

	// Re-dispatching the same call (same tool_call_id) writes nothing twice.
	first := tool.Execute(context.Background(), Call{ToolCallID: "call_1"}, args)
	again := tool.Execute(context.Background(), Call{ToolCallID: "call_1", Attempt: 2}, args)
	other := tool.Execute(context.Background(), Call{ToolCallID: "call_2"}, args)
	if first.Status != OK || again.Status != OK || other.Status != OK {
		t.Fatalf("outcomes %+v %+v %+v", first, again, other)
	}
	id1, id1b, id2 := first.Result.(map[string]any)["id"], again.Result.(map[string]any)["id"], other.Result.(map[string]any)["id"]
	if id1 != id1b || id1 == id2 || len(ob.msgs) != 2 {
		t.Errorf("ids %v %v %v, %d messages", id1, id1b, id2, len(ob.msgs))
	}
	if ob.msgs[0] != (Email{To: "ada@example.com", Subject: "Hello", Body: "Line one\nLine two"}) {
		t.Errorf("message %+v", ob.msgs[0])
	}

	// No idempotency key, no write; an outbox failure is internal.
	if out := tool.Execute(context.Background(), Call{}, args); out.Status != Internal {
		t.Errorf("no tool_call_id: %+v", out)
	}
	ob.fail = errors.New("disk full")
	if out := tool.Execute(context.Background(), Call{ToolCallID: "call_3"}, args); out.Status != Internal || !errors.Is(out.Cause, ob.fail) {
		t.Errorf("outbox failure: %+v", out)
	}

	for _, bad := range []string{
		`{"to":"not-an-address","subject":"s","body":"b"}`,
		`{"to":"a@b.co","subject":"two\r\nBcc: x@y.z","body":"b"}`,
		`{"to":"a@b.co","subject":"","body":"b"}`,
		`{"to":"a@b.co","subject":"s"}`,
	} {
		if _, e := tool.ValidateArgs(json.RawMessage(bad)); e == nil {
			t.Errorf("send_email accepted %s", bad)
		}
	}
}

func TestCountDown(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tool := CountDown(fake, 2*time.Second)
	args, e := tool.ValidateArgs(json.RawMessage(`{"from":3}`))
	if e != nil {
		t.Fatal(e)
	}
	progress := make(chan string, 8) // at most "from" (≤ 10) lines per run
	done := make(chan Outcome, 1)
	go func() {
		done <- tool.Execute(context.Background(), Call{Progress: func(m string) { progress <- m }}, args)
	}()
	for _, want := range []string{"3", "2", "1"} {
		if got := <-progress; got != want {
			t.Fatalf("progress %q, want %q", got, want)
		}
		if fake.Waiters() != 1 {
			t.Fatalf("progress %s reported before its step's timer was armed", want)
		}
		select {
		case out := <-done:
			t.Fatalf("finished before the clock moved: %+v", out)
		default:
		}
		fake.Advance(2 * time.Second)
	}
	out := <-done
	if out.Status != OK || out.Result.(map[string]any)["counted_from"] != int64(3) {
		t.Errorf("outcome %+v", out)
	}

	// Cancellation stops it between steps.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- tool.Execute(ctx, Call{Progress: func(m string) { progress <- m }}, map[string]any{})
	}()
	<-progress
	cancel()
	out = <-done
	if out.Status != Internal || !errors.Is(out.Cause, context.Canceled) {
		t.Errorf("cancelled count_down: %+v", out)
	}
	if _, e := tool.ValidateArgs(json.RawMessage(`{"from":11}`)); e == nil {
		t.Error("from above 10 accepted")
	}
}

func TestWebSearch(t *testing.T) {
	ws := WebSearch()
	if string(ws.Native()) != WebSearchNative || ws.NativeFormat() != FormatAnthropic {
		t.Errorf("native %s format %s", ws.Native(), ws.NativeFormat())
	}
	var n map[string]any
	if err := json.Unmarshal(ws.Native(), &n); err != nil || n["type"] != "web_search_20250305" || n["name"] != "web_search" || n["max_uses"] != 3.0 {
		t.Errorf("native definition %v", n)
	}
	if out := ws.Execute(context.Background(), Call{}, nil); out.Status != ToolError {
		t.Error("a provider tool was run locally")
	}
}

// TestTestToolsOnlyWhenAsked: echo, failing and count_down exist to exercise the app; a real
// model is not offered them unless the operator asks (the demo model's app asks).
func TestTestToolsOnlyWhenAsked(t *testing.T) {
	names := func(ts []*Tool) map[string]bool {
		out := map[string]bool{}
		for _, tl := range ts {
			out[tl.Name()] = true
		}
		return out
	}
	plain := names(Builtins(BuiltinDeps{Outbox: &memOutbox{}}))
	for _, n := range []string{"echo", "failing", "count_down"} {
		if plain[n] {
			t.Errorf("%s is offered without TestTools", n)
		}
	}
	for _, n := range []string{"get_current_time", "ask_user", "geolocation", "send_email", "web_search"} {
		if !plain[n] {
			t.Errorf("%s is missing", n)
		}
	}
	if with := names(Builtins(BuiltinDeps{Outbox: &memOutbox{}, TestTools: true})); !with["echo"] || !with["failing"] || !with["count_down"] {
		t.Errorf("TestTools: %v", with)
	}
}

// TestClientToolsAskByDefault: a client tool asks its owner before it runs unless it opts out.
func TestClientToolsAskByDefault(t *testing.T) {
	if !Geolocation().AsksBeforeRunning() {
		t.Fatal("geolocation runs without asking")
	}
	quiet := mustNew(Spec{Name: "pick", Description: "d", Executor: Client, Parameters: json.RawMessage(`{"type":"object"}`), RunWithoutAsking: true})
	if quiet.AsksBeforeRunning() {
		t.Fatal("RunWithoutAsking is ignored")
	}
}
