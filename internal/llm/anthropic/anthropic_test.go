package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"parley/internal/clock"
	"parley/internal/llm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ev is one server-sent event as the Messages API writes it: a named event and its data.
type ev struct{ name, data string }

func messageStart(in int) ev {
	return ev{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`, in)}
}

func blockStart(i int, block string) ev {
	return ev{"content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, block)}
}

func textDelta(i int, s string) ev {
	b, _ := json.Marshal(s)
	return ev{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, b)}
}

func jsonDelta(i int, s string) ev {
	b, _ := json.Marshal(s)
	return ev{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, b)}
}

func blockStop(i int) ev {
	return ev{"content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i)}
}

func messageDelta(stop string, out int) ev {
	return ev{"message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, out)}
}

var (
	ping        = ev{"ping", `{"type": "ping"}`}
	messageStop = ev{"message_stop", `{"type":"message_stop"}`}
)

type server struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	scripts []http.HandlerFunc
}

func newServer(t *testing.T, scripts ...http.HandlerFunc) *server {
	s := &server{t: t, scripts: scripts}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/messages" || r.Method != http.MethodPost {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.bodies)
		s.bodies = append(s.bodies, body)
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		if n >= len(s.scripts) {
			http.Error(w, "no script for request", http.StatusTeapot)
			return
		}
		s.scripts[n](w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func (s *server) body(i int) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m map[string]any
	if err := json.Unmarshal(s.bodies[i], &m); err != nil {
		s.t.Fatalf("request body %d is not JSON: %v", i, err)
	}
	return m
}

func (s *server) provider(t *testing.T, clk clock.Clock) *Provider {
	p, err := New(Config{APIKey: "sk-ant-test-secret", BaseURL: s.srv.URL, Model: "claude-sonnet-4-5", HTTPClient: s.srv.Client(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sse(events ...ev) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
			w.(http.Flusher).Flush()
		}
	}
}

func status(code int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func collect(t *testing.T, p llm.Provider, ctx context.Context, req llm.Request) ([]llm.Event, llm.Response, error) {
	t.Helper()
	var evs []llm.Event
	resp, err := p.Stream(ctx, req, func(e llm.Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, resp, err
}

func userReq(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

func TestStreamsTextDeltasUsageAndStopReason(t *testing.T) {
	s := newServer(t, sse(
		messageStart(25),
		blockStart(0, `{"type":"text","text":""}`),
		ping,
		textDelta(0, "Hello"),
		textDelta(0, ", wor"),
		textDelta(0, "ld!"),
		blockStop(0),
		messageDelta("end_turn", 15),
		messageStop,
	))
	tool := json.RawMessage(`{"name":"get_current_time","description":"now","input_schema":{"type":"object","properties":{"tz":{"type":"string"}}}}`)
	req := llm.Request{System: "be brief", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, Tools: []llm.Tool{tool}}
	evs, resp, err := collect(t, s.provider(t, nil), context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	for _, e := range evs {
		if e.Type != llm.EventTextDelta {
			t.Fatalf("unexpected event %+v", e)
		}
		deltas = append(deltas, e.Text)
	}
	if got := strings.Join(deltas, "|"); got != "Hello|, wor|ld!" {
		t.Errorf("deltas = %q", got)
	}
	if resp.Text != "Hello, world!" || resp.StopReason != "end_turn" || resp.Usage != (llm.Usage{InputTokens: 25, OutputTokens: 15}) {
		t.Errorf("response = %+v", resp)
	}
	body := s.body(0)
	if body["model"] != "claude-sonnet-4-5" || body["stream"] != true || body["max_tokens"] != float64(DefaultMaxTokens) {
		t.Errorf("model/stream/max_tokens = %v %v %v", body["model"], body["stream"], body["max_tokens"])
	}
	sys, _ := json.Marshal(body["system"])
	if string(sys) != `[{"text":"be brief","type":"text"}]` {
		t.Errorf("system = %s", sys)
	}
	sentTool, _ := json.Marshal(body["tools"].([]any)[0])
	if !jsonEqual(t, sentTool, tool) {
		t.Errorf("tool sent as %s, want verbatim %s", sentTool, tool)
	}
	h := s.headers[0]
	if h.Get("X-Api-Key") != "sk-ant-test-secret" || h.Get("Anthropic-Version") == "" {
		t.Errorf("headers x-api-key=%q anthropic-version=%q", h.Get("X-Api-Key"), h.Get("Anthropic-Version"))
	}
}

func TestReassemblesToolUseInputFragments(t *testing.T) {
	s := newServer(t, sse(
		messageStart(400),
		blockStart(0, `{"type":"text","text":""}`),
		textDelta(0, "Checking both."),
		blockStop(0),
		blockStart(1, `{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{}}`),
		jsonDelta(1, ""),
		jsonDelta(1, `{"location": "San Fra`),
		jsonDelta(1, `ncisco, CA"}`),
		blockStop(1),
		blockStart(2, `{"type":"tool_use","id":"toolu_01B","name":"get_current_time","input":{}}`),
		jsonDelta(2, `{"timezone":`),
		jsonDelta(2, `"America/Los_Angeles"}`),
		blockStop(2),
		blockStart(3, `{"type":"tool_use","id":"toolu_01C","name":"noargs","input":{}}`),
		blockStop(3),
		messageDelta("tool_use", 89),
		messageStop,
	))
	evs, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("weather and time"))
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "toolu_01A", Name: "get_weather", Args: json.RawMessage(`{"location": "San Francisco, CA"}`)},
		{ID: "toolu_01B", Name: "get_current_time", Args: json.RawMessage(`{"timezone":"America/Los_Angeles"}`)},
		{ID: "toolu_01C", Name: "noargs", Args: json.RawMessage(`{}`)},
	}
	if resp.StopReason != "tool_use" || resp.Text != "Checking both." || len(resp.ToolCalls) != len(want) {
		t.Fatalf("response = %+v", resp)
	}
	for i, w := range want {
		g := resp.ToolCalls[i]
		if g.ID != w.ID || g.Name != w.Name || string(g.Args) != string(w.Args) || g.Provider {
			t.Errorf("call %d = %+v (args %s), want %+v (args %s)", i, g, g.Args, w, w.Args)
		}
	}
	var calls []string
	for _, e := range evs {
		if e.Type == llm.EventToolCall {
			calls = append(calls, e.ToolCall.ID)
		}
	}
	if strings.Join(calls, ",") != "toolu_01A,toolu_01B,toolu_01C" {
		t.Errorf("tool-call events = %v", calls)
	}
}

// The web search result block as the API streams it (abridged content, real shape).
const webSearchResult = `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","content":[{"type":"web_search_result","title":"Weather in New York City","url":"https://weather.example/nyc","encrypted_content":"EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2...","page_age":"June 12, 2025"}]}`

func TestWebSearchPassesThroughAndIsReplayedVerbatim(t *testing.T) {
	s := newServer(t,
		sse(
			messageStart(2679),
			blockStart(0, `{"type":"text","text":""}`),
			textDelta(0, "I'll search for that."),
			blockStop(0),
			blockStart(1, `{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}`),
			jsonDelta(1, ""),
			jsonDelta(1, `{"query": "weather NYC today"}`),
			blockStop(1),
			blockStart(2, webSearchResult),
			blockStop(2),
			blockStart(3, `{"type":"text","text":""}`),
			textDelta(3, " It is sunny. Let me note the time."),
			blockStop(3),
			blockStart(4, `{"type":"tool_use","id":"toolu_01T","name":"get_current_time","input":{}}`),
			jsonDelta(4, `{}`),
			blockStop(4),
			ev{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":10682,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":510,"server_tool_use":{"web_search_requests":1}}}`},
			messageStop,
		),
		sse(messageStart(11000), blockStart(0, `{"type":"text","text":""}`), textDelta(0, "Done."), blockStop(0), messageDelta("end_turn", 3), messageStop),
	)
	p := s.provider(t, nil)
	webSearch := json.RawMessage(`{"type":"web_search_20250305","name":"web_search","max_uses":3}`)
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "weather in NYC?"}}, Tools: []llm.Tool{webSearch}}
	_, resp, err := collect(t, p, context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 {
		t.Fatalf("calls = %+v", resp.ToolCalls)
	}
	ws := resp.ToolCalls[0]
	if !ws.Provider || ws.ID != "srvtoolu_014hJH82Qum7Td6UV8gDXThB" || ws.Name != "web_search" || string(ws.Args) != `{"query": "weather NYC today"}` {
		t.Errorf("web search call = %+v (args %s)", ws, ws.Args)
	}
	if string(ws.Result) != webSearchResult {
		t.Errorf("result block not verbatim:\n%s\nwant\n%s", ws.Result, webSearchResult)
	}
	if local := resp.ToolCalls[1]; local.Provider || local.ID != "toolu_01T" {
		t.Errorf("local call = %+v", local)
	}
	if resp.Text != "I'll search for that. It is sunny. Let me note the time." || resp.Usage != (llm.Usage{InputTokens: 10682, OutputTokens: 510}) {
		t.Errorf("text %q usage %+v", resp.Text, resp.Usage)
	}
	if b, _ := json.Marshal(s.body(0)["tools"]); !jsonEqual(t, b, []byte(`[`+string(webSearch)+`]`)) {
		t.Errorf("tools sent = %s", b)
	}

	// The next request replays the assistant turn: the provider blocks verbatim, the local
	// call's result as a tool_result of the following user message.
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: "toolu_01T", Content: `{"ok":true,"result":{"time":"2026-03-01T12:00:00Z"}}`},
	)
	if _, _, err := collect(t, p, context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs, _ := json.Marshal(s.body(1)["messages"])
	want := `[{"role":"user","content":[{"type":"text","text":"weather in NYC?"}]},` +
		`{"role":"assistant","content":[` +
		`{"type":"text","text":"I'll search for that. It is sunny. Let me note the time."},` +
		`{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{"query":"weather NYC today"}},` +
		webSearchResult + `,` +
		`{"type":"tool_use","id":"toolu_01T","name":"get_current_time","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01T","content":[{"type":"text","text":"{\"ok\":true,\"result\":{\"time\":\"2026-03-01T12:00:00Z\"}}"}],"is_error":false}]}]`
	if !jsonEqual(t, msgs, []byte(want)) {
		t.Errorf("replayed messages:\n%s\nwant\n%s", msgs, want)
	}
	if !strings.Contains(string(s.bodies[1]), `"encrypted_content":"EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2..."`) {
		t.Error("the encrypted content of the search result must reach the provider unchanged")
	}
}

func TestGroupsToolResultsAndMarksErrors(t *testing.T) {
	s := newServer(t, sse(messageStart(1), messageDelta("end_turn", 1), messageStop))
	req := llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "do two things"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "t1", Name: "a"}, {ID: "t2", Name: "b", Args: json.RawMessage(`{"x":1}`)}}},
		{Role: llm.RoleTool, ToolCallID: "t1", Content: `{"ok":true,"result":{}}`},
		{Role: llm.RoleTool, ToolCallID: "t2", Content: `{"ok":false,"error":{"kind":"denied","message":"no"}}`},
		{Role: llm.RoleUser, Content: "and?"},
	}}
	if _, _, err := collect(t, s.provider(t, nil), context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs := s.body(0)["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("want user, assistant, one merged user message; got %d: %v", len(msgs), msgs)
	}
	last, _ := json.Marshal(msgs[2])
	want := `{"role":"user","content":[` +
		`{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"{\"ok\":true,\"result\":{}}"}],"is_error":false},` +
		`{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"{\"ok\":false,\"error\":{\"kind\":\"denied\",\"message\":\"no\"}}"}],"is_error":true},` +
		`{"type":"text","text":"and?"}]}`
	if !jsonEqual(t, last, []byte(want)) {
		t.Errorf("tool results sent as\n%s\nwant\n%s", last, want)
	}
}

func TestPausedTurnIsContinued(t *testing.T) {
	s := newServer(t,
		sse(
			messageStart(100),
			blockStart(0, `{"type":"text","text":""}`), textDelta(0, "Searching."), blockStop(0),
			blockStart(1, `{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}`),
			jsonDelta(1, `{"query":"weather NYC today"}`), blockStop(1),
			blockStart(2, webSearchResult), blockStop(2),
			messageDelta("pause_turn", 40),
			messageStop,
		),
		sse(
			messageStart(300),
			blockStart(0, `{"type":"text","text":""}`), textDelta(0, " Sunny."), blockStop(0),
			messageDelta("end_turn", 5),
			messageStop,
		),
	)
	evs, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("weather?"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "Searching. Sunny." || resp.StopReason != "end_turn" || len(resp.ToolCalls) != 1 || !resp.ToolCalls[0].Provider ||
		resp.Usage != (llm.Usage{InputTokens: 400, OutputTokens: 45}) {
		t.Fatalf("merged response = %+v", resp)
	}
	if len(evs) != 3 || evs[1].Type != llm.EventToolCall || evs[2].Text != " Sunny." {
		t.Errorf("events = %+v", evs)
	}
	msgs := s.body(1)["messages"].([]any)
	last, _ := json.Marshal(msgs[len(msgs)-1])
	want := `{"role":"assistant","content":[{"type":"text","text":"Searching."},` +
		`{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{"query":"weather NYC today"}},` + webSearchResult + `]}`
	if len(msgs) != 2 || !jsonEqual(t, last, []byte(want)) {
		t.Errorf("continuation sent %d messages, last %s", len(msgs), last)
	}
}

func TestServerToolUseWithoutResultIsNotReplayed(t *testing.T) {
	s := newServer(t, sse(messageStart(1), messageDelta("end_turn", 1), messageStop))
	req := llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "search"},
		{Role: llm.RoleAssistant, Content: "Searching.", ToolCalls: []llm.ToolCall{{ID: "srvtoolu_x", Name: "web_search", Args: json.RawMessage(`{"query":"q"}`), Provider: true}}},
		{Role: llm.RoleUser, Content: "well?"},
	}}
	if _, _, err := collect(t, s.provider(t, nil), context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs, _ := json.Marshal(s.body(0)["messages"])
	want := `[{"role":"user","content":[{"type":"text","text":"search"}]},{"role":"assistant","content":[{"type":"text","text":"Searching."}]},{"role":"user","content":[{"type":"text","text":"well?"}]}]`
	if !jsonEqual(t, msgs, []byte(want)) {
		t.Errorf("messages = %s", msgs)
	}
}

func TestMapsHTTPFailures(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	errBody := func(typ, msg string) string {
		return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, typ, msg)
	}
	cases := []struct {
		name       string
		script     http.HandlerFunc
		kind       string
		status     int
		retryable  bool
		retryAfter time.Duration
		message    string
	}{
		{"400", status(400, nil, errBody("invalid_request_error", "messages: roles must alternate")), "provider_http_error", 400, false, 0, "roles must alternate"},
		{"401", status(401, nil, errBody("authentication_error", "invalid x-api-key")), "not_authenticated", 401, false, 0, "invalid x-api-key"},
		{"403", status(403, nil, errBody("permission_error", "no access")), "not_authenticated", 403, false, 0, "no access"},
		{"500", status(500, nil, errBody("api_error", "Internal server error")), "provider_http_error", 500, true, 0, "Internal server error"},
		{"529 overloaded", status(529, nil, errBody("overloaded_error", "Overloaded")), "provider_http_error", 529, true, 0, "Overloaded"},
		{"429 retry-after seconds", status(429, map[string]string{"Retry-After": "12"}, errBody("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")),
			"rate_limited", 429, true, 12 * time.Second, "per-minute rate limit"},
		{"429 retry-after date", status(429, map[string]string{"Retry-After": now.Add(time.Minute).Format(http.TimeFormat)}, errBody("rate_limit_error", "slow")),
			"rate_limited", 429, true, time.Minute, "slow"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.script, tc.script, tc.script)
			_, _, err := collect(t, s.provider(t, clock.NewFake(now)), context.Background(), userReq("hi"))
			var le *llm.Error
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want *llm.Error", err, err)
			}
			if le.Kind != tc.kind || le.Status != tc.status || le.Retryable != tc.retryable || le.RetryAfter != tc.retryAfter || !strings.Contains(le.Message, tc.message) {
				t.Errorf("error = %+v, want kind %s status %d retryable %v after %v message ~%q", le, tc.kind, tc.status, tc.retryable, tc.retryAfter, tc.message)
			}
			if strings.Contains(err.Error(), "sk-ant-test-secret") {
				t.Errorf("the error leaks the API key: %v", err)
			}
			if n := s.requests(); n != 1 {
				t.Errorf("%d requests: the SDK must not retry on its own", n)
			}
		})
	}
}

func TestErrorEventInStream(t *testing.T) {
	cases := []struct {
		typ       string
		kind      string
		status    int
		retryable bool
	}{
		{"overloaded_error", "provider_http_error", 529, true},
		{"api_error", "provider_http_error", 500, true},
		{"rate_limit_error", "rate_limited", 429, true},
		{"invalid_request_error", "provider_http_error", 400, false},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			s := newServer(t, sse(messageStart(1), blockStart(0, `{"type":"text","text":""}`), textDelta(0, "Hi"),
				ev{"error", fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":"it broke"}}`, tc.typ)}))
			_, _, err := collect(t, s.provider(t, nil), context.Background(), userReq("hi"))
			var le *llm.Error
			if !errors.As(err, &le) || le.Kind != tc.kind || le.Status != tc.status || le.Retryable != tc.retryable || le.Message != "it broke" {
				t.Fatalf("err = %#v", err)
			}
		})
	}
}

func TestStreamCutMidwayIsRetryable(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"ends before message_stop": sse(messageStart(1), blockStart(0, `{"type":"text","text":""}`), textDelta(0, "Hel"),
			blockStop(0), blockStart(1, `{"type":"tool_use","id":"toolu_1","name":"x","input":{}}`), jsonDelta(1, `{"a":`)),
		"connection dropped": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			for _, e := range []ev{messageStart(1), blockStart(0, `{"type":"text","text":""}`), textDelta(0, "Hel")} {
				fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
			}
			fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_blo")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		},
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, script)
			evs, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("hi"))
			if ok, _ := llm.IsRetryable(err); !ok {
				t.Fatalf("err = %v, want a retryable *llm.Error", err)
			}
			if len(evs) == 0 || evs[0].Text != "Hel" {
				t.Errorf("the partial text should have streamed before the cut: %+v", evs)
			}
			for _, e := range evs {
				if e.Type == llm.EventToolCall {
					t.Errorf("a cut stream must not emit tool calls: %+v", e)
				}
			}
			if resp.Text != "" || resp.ToolCalls != nil {
				t.Errorf("a cut stream returns no response, got %+v", resp)
			}
		})
	}
}

func TestContextCancellationStopsTheStream(t *testing.T) {
	released := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(released)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, e := range []ev{messageStart(1), blockStart(0, `{"type":"text","text":""}`), textDelta(0, "first")} {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.provider(t, nil).Stream(ctx, userReq("hi"), func(e llm.Event) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the client go away")
	}
}

func TestNewRequiresModel(t *testing.T) {
	if _, err := New(Config{APIKey: "k"}); err == nil {
		t.Fatal("New accepted an empty model")
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
