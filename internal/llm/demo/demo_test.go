package demo

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/tools"
)

type outbox struct{}

func (outbox) Send(ctx context.Context, call tools.Call, msg tools.Email) (string, error) {
	return "out_" + call.ToolCallID, nil
}

var fixedNow = time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)

func registry(t *testing.T) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(tools.Builtins(tools.BuiltinDeps{Clock: clock.NewFake(fixedNow), Outbox: outbox{}, CountDownStep: time.Nanosecond, TestTools: true})...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func request(r *tools.Registry, msgs ...llm.Message) llm.Request {
	return llm.Request{Messages: msgs, Tools: r.OpenAITools()}
}

func user(s string) llm.Message { return llm.Message{Role: llm.RoleUser, Content: s} }

// checkCall validates a call's arguments against the real tool's schema (and, for a human
// tool, its form against the elicitation subset), as the agent will.
func checkCall(t *testing.T, r *tools.Registry, c llm.ToolCall) map[string]any {
	t.Helper()
	tool, ok := r.Get(c.Name)
	if !ok {
		t.Fatalf("call to unknown tool %q", c.Name)
	}
	args, verr := tool.ValidateArgs(c.Args)
	if verr != nil {
		t.Fatalf("%s args %s do not validate: %v %v", c.Name, c.Args, verr, verr.Details)
	}
	if tool.Executor() == tools.Human {
		if _, perr := tool.Elicitation(args); perr != nil {
			t.Fatalf("%s form refused: %v %v", c.Name, perr, perr.Details)
		}
	}
	return args
}

func TestPhrasesDriveTools(t *testing.T) {
	r := registry(t)
	cases := []struct {
		say   string
		calls []string
		args  map[string]any // expected args of the first call (subset)
	}{
		{"email bob@example.com about lunch", []string{"send_email"}, map[string]any{"to": "bob@example.com", "subject": "Lunch"}},
		{"Please email alice about the quarterly report.", []string{"send_email"}, map[string]any{"to": "alice@example.com", "subject": "The quarterly report"}},
		{"send a mail to jo.smith@corp.example.org regarding Friday", []string{"send_email"}, map[string]any{"to": "jo.smith@corp.example.org", "subject": "Friday"}},
		{"deploy the website", []string{"deploy"}, map[string]any{"service": "website", "environment": "staging"}},
		{"Deploy billing-api to production", []string{"deploy"}, map[string]any{"service": "billing-api", "environment": "production"}},
		{"deploy it to prod", []string{"deploy"}, map[string]any{"service": "website", "environment": "production"}},
		{"Where am I?", []string{"geolocation"}, map[string]any{}},
		{"what's my precise location", []string{"geolocation"}, map[string]any{"high_accuracy": true}},
		{"ask me a few questions", []string{"ask_user"}, nil},
		{"let's do a quick survey", []string{"ask_user"}, nil},
		{"What time is it?", []string{"get_current_time"}, map[string]any{"format": "human"}},
		{"what time is it in Tokyo", []string{"get_current_time"}, map[string]any{"timezone": "Asia/Tokyo"}},
		{"count to 5", []string{"count_down"}, map[string]any{"from": int64(5)}},
		{"count down from 40", []string{"count_down"}, map[string]any{"from": int64(10)}},
		{"make something fail", []string{"failing"}, map[string]any{"retryable": false}},
		{"show me a retry", []string{"failing"}, map[string]any{"retryable": true}},
		{"echo: hello there", []string{"echo"}, map[string]any{"text": "hello there"}},
		{"mixed", []string{"get_current_time", "echo", "ask_user"}, nil},
		{"Do everything!", []string{"get_current_time", "echo", "ask_user"}, nil},
		{"search the web for Go generics", nil, nil},
		{"hello", nil, nil},
		{"tell me a story", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.say, func(t *testing.T) {
			resp := Answer(request(r, user(tc.say)))
			var names []string
			for _, c := range resp.ToolCalls {
				names = append(names, c.Name)
				checkCall(t, r, c)
			}
			if !reflect.DeepEqual(names, tc.calls) {
				t.Fatalf("calls = %v, want %v (text %q)", names, tc.calls, resp.Text)
			}
			if resp.Text == "" {
				t.Error("every answer says something")
			}
			wantStop := "end_turn"
			if len(tc.calls) > 0 {
				wantStop = "tool_use"
			}
			if resp.StopReason != wantStop {
				t.Errorf("stop reason = %q", resp.StopReason)
			}
			if len(tc.args) > 0 {
				got := checkCall(t, r, resp.ToolCalls[0])
				for k, v := range tc.args {
					if !reflect.DeepEqual(got[k], v) {
						t.Errorf("arg %s = %#v, want %#v", k, got[k], v)
					}
				}
			}
		})
	}
}

func TestGatedAndHumanCallsAreWhatTheRegistrySays(t *testing.T) {
	r := registry(t)
	resp := Answer(request(r, user("do everything")))
	var server, human int
	for _, c := range resp.ToolCalls {
		tool, _ := r.Get(c.Name)
		switch tool.Executor() {
		case tools.Server:
			server++
		case tools.Human:
			human++
		}
	}
	if server != 2 || human != 1 {
		t.Errorf("mixed turn: %d server and %d human calls, want 2 and 1", server, human)
	}
	email := Answer(request(r, user("email bob@example.com about lunch"))).ToolCalls[0]
	if tool, _ := r.Get(email.Name); !tool.Gated() {
		t.Error("the email call must be the gated tool")
	}
	deploy := Answer(request(r, user("deploy the website"))).ToolCalls[0]
	if tool, _ := r.Get(deploy.Name); !tool.Gated() || tool.Approvers() != tools.ByReviewer {
		t.Error("the deploy call must be the reviewer-gated tool")
	}
	args := checkCall(t, r, email)
	if body, _ := args["body"].(string); !strings.Contains(body, "Hi Bob") || !strings.Contains(body, "lunch") {
		t.Errorf("body = %q", body)
	}
}

func TestSearchIsNeverDispatchedLocally(t *testing.T) {
	r := registry(t)
	req := request(r, user("search for the latest Go release"))
	req.Tools = r.AnthropicTools() // even with web_search offered, the demo never calls it
	resp := Answer(req)
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Text, "provider") {
		t.Fatalf("search answer = %+v", resp)
	}
}

func TestMissingToolIsSaidPlainly(t *testing.T) {
	resp := Answer(llm.Request{Messages: []llm.Message{user("where am I")}})
	if len(resp.ToolCalls) != 0 || !strings.Contains(resp.Text, "`geolocation`") {
		t.Fatalf("answer = %+v", resp)
	}
	plain := Answer(llm.Request{Messages: []llm.Message{user("hi")}})
	if strings.Contains(plain.Text, "email bob") {
		t.Errorf("the help text offers a tool that is not there: %q", plain.Text)
	}
	if !strings.Contains(plain.Text, "demo model") {
		t.Errorf("the demo must say it is the demo model: %q", plain.Text)
	}
}

func TestAcceptsAnthropicFormatTools(t *testing.T) {
	r := registry(t)
	req := request(r, user("what time is it"))
	req.Tools = r.AnthropicTools()
	if resp := Answer(req); len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "get_current_time" {
		t.Fatalf("answer = %+v", resp)
	}
}

// run executes server calls with the real tools and builds the tool messages the agent would
// send back, with resolutions for the others.
func TestSummarizesResultsIncludingFailures(t *testing.T) {
	r := registry(t)
	first := Answer(request(r, user("do everything")))
	msgs := []llm.Message{user("do everything"), {Role: llm.RoleAssistant, Content: first.Text, ToolCalls: first.ToolCalls}}
	for _, c := range first.ToolCalls {
		tool, _ := r.Get(c.Name)
		var env json.RawMessage
		if tool.Executor() == tools.Server {
			args := checkCall(t, r, c)
			env = tool.Execute(context.Background(), tools.Call{ToolCallID: c.ID}, args).Envelope(0)
		} else {
			env = tools.ErrorEnvelope(fault.New(fault.KindTimeout, "the user did not respond", nil))
		}
		msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: string(env)})
	}
	resp := Answer(request(r, msgs...))
	if len(resp.ToolCalls) != 0 {
		t.Fatalf("a summary makes no calls: %+v", resp.ToolCalls)
	}
	for _, want := range []string{
		"- **get_current_time**: it is 2026-03-01T12:30:00Z (UTC).",
		`- **echo**: echoed "hello from the demo model".`,
		"- **ask_user**: no answer came in time",
		"Not everything went as planned",
	} {
		if !strings.Contains(resp.Text, want) {
			t.Errorf("summary lacks %q:\n%s", want, resp.Text)
		}
	}
}

func TestSummaryReadsEachErrorKind(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"send_email", string(tools.ErrorEnvelope(fault.New(fault.KindDenied, "not to my boss", nil))), "you denied it: not to my boss"},
		{"ask_user", string(tools.ErrorEnvelope(fault.New(fault.KindDeclined, "declined", nil))), "you declined to answer"},
		{"geolocation", string(tools.ErrorEnvelope(fault.New(fault.KindNoClient, "no browser", nil))), "no browser was connected"},
		{"failing", string(tools.ErrorEnvelope(fault.New(fault.KindCommandFailed, "boom", nil))), "it failed (`command_failed`): boom"},
		{"send_email", string(tools.OKEnvelope(map[string]any{"id": "o1", "status": "queued", "to": "bob@example.com", "subject": "Lunch"})), `the email to bob@example.com ("Lunch") is queued.`},
		{"geolocation", string(tools.OKEnvelope(map[string]any{"latitude": 48.8566, "longitude": 2.3522, "accuracy": 30})), "you are at 48.8566, 2.3522 (within about 30 m)."},
		{"ask_user", string(tools.OKEnvelope(map[string]any{"action": "accept", "content": map[string]any{"name": "Ada", "subscribe": true}})), "you answered name = Ada, subscribe = true."},
		{"count_down", string(tools.OKEnvelope(map[string]any{"counted_from": 5, "done": true})), "counted down from 5."},
		{"other", "not json at all", "returned `not json at all`"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			msgs := []llm.Message{user("x"), {Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: tc.name}}}, {Role: llm.RoleTool, ToolCallID: "c1", Content: tc.content}}
			resp := Answer(llm.Request{Messages: msgs})
			if !strings.Contains(resp.Text, tc.want) {
				t.Errorf("summary:\n%s\nwant it to contain %q", resp.Text, tc.want)
			}
		})
	}
}

func TestDeterministicAndUniqueIDs(t *testing.T) {
	r := registry(t)
	req := request(r, user("do everything"))
	a, b := Answer(req), Answer(req)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same request gave two answers")
	}
	// Replay a conversation of several tool turns: no id may repeat.
	seen := map[string]bool{}
	msgs := []llm.Message{}
	for _, say := range []string{"do everything", "what time is it", "do everything", "where am I", "mixed"} {
		msgs = append(msgs, user(say))
		resp := Answer(request(r, msgs...))
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
		for _, c := range resp.ToolCalls {
			if seen[c.ID] {
				t.Fatalf("id %s repeated", c.ID)
			}
			seen[c.ID] = true
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Content: `{"ok":true,"result":{}}`})
		}
		sum := Answer(request(r, msgs...))
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Content: sum.Text})
	}
	// Even a history whose length was rewritten cannot make an id repeat.
	clash := []llm.Message{{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "demo_2_0"}}}, user("what time is it")}
	if id := Answer(request(r, clash...)).ToolCalls[0].ID; id == "demo_2_0" {
		t.Fatalf("id %s repeats one already in the conversation", id)
	}
}

func TestStreamsWordSizedDeltas(t *testing.T) {
	r := registry(t)
	p := New(Config{Pace: NoPace})
	var text strings.Builder
	var deltas, calls int
	resp, err := p.Stream(context.Background(), request(r, user("email bob@example.com about lunch")), func(e llm.Event) error {
		switch e.Type {
		case llm.EventTextDelta:
			deltas++
			if strings.Count(strings.TrimSpace(e.Text), " ") > 0 {
				t.Errorf("delta %q is more than a word", e.Text)
			}
			text.WriteString(e.Text)
		case llm.EventToolCall:
			if deltas == 0 {
				t.Error("the tool call came before the text")
			}
			calls++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if text.String() != resp.Text || deltas < 5 || calls != 1 {
		t.Errorf("streamed %q in %d deltas and %d calls; response %q", text.String(), deltas, calls, resp.Text)
	}
	if p.Name() != "demo" || p.ToolFormat() != "demo" {
		t.Error("name and format")
	}
}

func TestPacingUsesTheClockAndStopsOnCancel(t *testing.T) {
	clk := clock.NewFake(fixedNow)
	p := New(Config{Pace: 10 * time.Millisecond, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		_, err := p.Stream(ctx, llm.Request{Messages: []llm.Message{user("hello")}}, func(e llm.Event) error {
			got <- e.Text
			return nil
		})
		done <- err
	}()
	<-got // the first delta goes out at once
	for clk.Waiters() == 0 {
		select {
		case err := <-done:
			t.Fatalf("stream ended without pausing: %v", err)
		default:
		}
		runtime.Gosched() // the stream goroutine has not armed its pause yet
	}
	if len(got) != 0 {
		t.Fatal("a second delta went out before the pause elapsed")
	}
	clk.Advance(10 * time.Millisecond)
	<-got // the pause elapsed: the next delta goes out
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestEmitErrorStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	_, err := New(Config{Pace: NoPace}).Stream(context.Background(), llm.Request{Messages: []llm.Message{user("hello")}}, func(llm.Event) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d emits", err, n)
	}
}

func TestDefaultPaceIsAFewMilliseconds(t *testing.T) {
	if p := New(Config{}); p.pace != DefaultPace || DefaultPace <= 0 || DefaultPace > 50*time.Millisecond {
		t.Errorf("zero Config paces at %v", p.pace)
	}
	if p := New(Config{Pace: NoPace}); p.pace > 0 {
		t.Errorf("NoPace paces at %v", p.pace)
	}
}

func TestWordsRoundTrip(t *testing.T) {
	for _, s := range []string{"", "one", "  lead and trail  ", "a\n\n- b\n- c", "Hi Bob,\n\nI wanted"} {
		if got := strings.Join(words(s), ""); got != s {
			t.Errorf("words(%q) joined = %q", s, got)
		}
	}
}

func TestSurveyFormHasEveryFieldKindInOrder(t *testing.T) {
	r := registry(t)
	c := Answer(request(r, user("ask me something"))).ToolCalls[0]
	var args struct {
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		t.Fatal(err)
	}
	s := string(args.Schema)
	order := []string{`"name":{"type":"string"`, `"enum":["red","green","blue"]`, `"type":"boolean"`, `"format":"date"`}
	last := -1
	for _, want := range order {
		i := strings.Index(s, want)
		if i <= last {
			t.Fatalf("form %s: %q missing or out of order", s, want)
		}
		last = i
	}
}
