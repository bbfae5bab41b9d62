package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// chunk renders one Chat Completions stream chunk as the API sends it.
func chunk(choices string) string {
	return `{"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_1","choices":` + choices + `}`
}

func delta(d string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return chunk(`[{"index":0,"delta":` + d + `,"logprobs":null,"finish_reason":` + f + `}]`)
}

const usageChunk = `{"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`

// server is a Chat Completions endpoint that answers each request with the next script.
type server struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	scripts []func(w http.ResponseWriter, r *http.Request)
}

func newServer(t *testing.T, scripts ...func(w http.ResponseWriter, r *http.Request)) *server {
	s := &server{t: t, scripts: scripts}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
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
	p, err := New(Config{APIKey: "sk-test-secret", BaseURL: s.srv.URL + "/v1", Model: "gpt-4o-mini", HTTPClient: s.srv.Client(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sse writes data lines as the API does, flushing after each event.
func sse(events ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
	}
}

func status(code int, header map[string]string, body string) func(w http.ResponseWriter, r *http.Request) {
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
		delta(`{"role":"assistant","content":"","refusal":null}`, ""),
		delta(`{"content":"Hello"}`, ""),
		delta(`{"content":", wor"}`, ""),
		delta(`{"content":"ld!"}`, ""),
		delta(`{}`, "stop"),
		usageChunk,
		"[DONE]",
	))
	p := s.provider(t, nil)
	tool := json.RawMessage(`{"type":"function","function":{"name":"get_current_time","description":"now","parameters":{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}}}`)
	req := llm.Request{System: "be brief", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, Tools: []llm.Tool{tool}, MaxTokens: 256}
	evs, resp, err := collect(t, p, context.Background(), req)
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
	if resp.Text != "Hello, world!" || resp.StopReason != "stop" || resp.Usage != (llm.Usage{InputTokens: 31, OutputTokens: 9}) || len(resp.ToolCalls) != 0 {
		t.Errorf("response = %+v", resp)
	}

	body := s.body(0)
	if body["model"] != "gpt-4o-mini" || body["stream"] != true || body["max_tokens"] != float64(256) {
		t.Errorf("body model/stream/max_tokens = %v %v %v", body["model"], body["stream"], body["max_tokens"])
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", body["stream_options"])
	}
	msgs := body["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" || msgs[0].(map[string]any)["content"] != "be brief" {
		t.Errorf("messages = %v", msgs)
	}
	sentTool, _ := json.Marshal(body["tools"].([]any)[0])
	if !jsonEqual(t, sentTool, tool) {
		t.Errorf("tool sent as %s, want verbatim %s", sentTool, tool)
	}
	if got := s.headers[0].Get("Authorization"); got != "Bearer sk-test-secret" {
		t.Errorf("Authorization = %q", got)
	}
}

func TestReassemblesInterleavedToolCallFragments(t *testing.T) {
	s := newServer(t, sse(
		delta(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_A","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
		delta(`{"tool_calls":[{"index":1,"id":"call_B","type":"function","function":{"name":"get_current_time","arguments":""}}]}`, ""),
		delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]}`, ""),
		delta(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\":"}}]}`, ""),
		delta(`{"tool_calls":[{"index":0,"function":{"arguments":"ation\": \"Paris\"}"}}]}`, ""),
		delta(`{"tool_calls":[{"index":1,"function":{"arguments":"\"UTC\"}"}}]}`, ""),
		delta(`{"tool_calls":[{"index":2,"id":"call_C","type":"function","function":{"name":"noargs","arguments":""}}]}`, ""),
		delta(`{}`, "tool_calls"),
		usageChunk,
		"[DONE]",
	))
	evs, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("weather and time"))
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "call_A", Name: "get_weather", Args: json.RawMessage(`{"location": "Paris"}`)},
		{ID: "call_B", Name: "get_current_time", Args: json.RawMessage(`{"tz":"UTC"}`)},
		{ID: "call_C", Name: "noargs", Args: json.RawMessage(`{}`)},
	}
	if resp.StopReason != "tool_calls" || len(resp.ToolCalls) != len(want) {
		t.Fatalf("response = %+v", resp)
	}
	for i, w := range want {
		g := resp.ToolCalls[i]
		if g.ID != w.ID || g.Name != w.Name || string(g.Args) != string(w.Args) || g.Provider {
			t.Errorf("call %d = %+v (args %s), want %+v (args %s)", i, g, g.Args, w, w.Args)
		}
	}
	if len(evs) != 3 {
		t.Fatalf("events = %d, want 3 tool-call events", len(evs))
	}
	for i, e := range evs {
		if e.Type != llm.EventToolCall || e.ToolCall.ID != want[i].ID {
			t.Errorf("event %d = %+v", i, e)
		}
	}
}

func TestAssignsFreshIDsWhenMissingOrRepeated(t *testing.T) {
	s := newServer(t, sse(
		delta(`{"tool_calls":[{"index":0,"type":"function","function":{"name":"a","arguments":"{}"}}]}`, ""),               // no id (some local servers)
		delta(`{"tool_calls":[{"index":1,"id":"call_0","type":"function","function":{"name":"b","arguments":"{}"}}]}`, ""), // repeats an earlier turn's id
		delta(`{"tool_calls":[{"index":2,"id":"call_x","type":"function","function":{"name":"c","arguments":"{}"}}]}`, ""),
		delta(`{"tool_calls":[{"index":3,"id":"call_x","type":"function","function":{"name":"d","arguments":"{}"}}]}`, ""), // repeats within the answer
		delta(`{}`, "tool_calls"),
		"[DONE]",
	))
	req := llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "go"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "b", Args: json.RawMessage(`{}`)}}},
		{Role: llm.RoleTool, ToolCallID: "call_0", Content: `{"ok":true}`},
		{Role: llm.RoleUser, Content: "again"},
	}}
	_, resp, err := collect(t, s.provider(t, nil), context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{"call_0": true}
	for i, c := range resp.ToolCalls {
		if c.ID == "" || seen[c.ID] {
			t.Errorf("call %d (%s) has id %q: empty or repeated", i, c.Name, c.ID)
		}
		seen[c.ID] = true
	}
	if resp.ToolCalls[2].ID != "call_x" {
		t.Errorf("the first use of call_x must keep the provider's id, got %q", resp.ToolCalls[2].ID)
	}
}

func TestReplaysAssistantToolCallsAndResults(t *testing.T) {
	s := newServer(t, sse(delta(`{"content":"done"}`, "stop"), "[DONE]"))
	req := llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "where am I"},
		{Role: llm.RoleAssistant, Content: "Let me check.", ToolCalls: []llm.ToolCall{
			{ID: "call_1", Name: "geolocation", Args: json.RawMessage(`{"precise":true}`)},
			{ID: "srvtoolu_1", Name: "web_search", Provider: true, Result: json.RawMessage(`{}`)},
		}},
		{Role: llm.RoleTool, ToolCallID: "call_1", Content: `{"ok":true,"result":{"lat":1}}`},
	}}
	if _, _, err := collect(t, s.provider(t, nil), context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs := s.body(0)["messages"].([]any)
	got, _ := json.Marshal(msgs)
	want := `[{"content":"where am I","role":"user"},` +
		`{"content":"Let me check.","tool_calls":[{"id":"call_1","function":{"arguments":"{\"precise\":true}","name":"geolocation"},"type":"function"}],"role":"assistant"},` +
		`{"content":"{\"ok\":true,\"result\":{\"lat\":1}}","tool_call_id":"call_1","role":"tool"}]`
	if !jsonEqual(t, got, []byte(want)) {
		t.Errorf("messages sent:\n%s\nwant\n%s", got, want)
	}
}

func TestMapsHTTPFailures(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		script     func(w http.ResponseWriter, r *http.Request)
		kind       string
		status     int
		retryable  bool
		retryAfter time.Duration
		message    string
	}{
		{"400 bad request", status(400, nil, `{"error":{"message":"Invalid 'messages[0].role'","type":"invalid_request_error","param":"messages","code":null}}`),
			"provider_http_error", 400, false, 0, "Invalid 'messages[0].role'"},
		{"401 bad key", status(401, nil, `{"error":{"message":"Incorrect API key provided: sk-te***cret.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`),
			"not_authenticated", 401, false, 0, "Incorrect API key provided"},
		{"403", status(403, nil, `{"error":{"message":"Project does not have access","type":"invalid_request_error"}}`),
			"not_authenticated", 403, false, 0, "does not have access"},
		{"404 unknown model (ollama shape)", status(404, nil, `{"error":"model \"llama9\" not found, try pulling it first"}`),
			"provider_http_error", 404, false, 0, "not found, try pulling"},
		{"500", status(500, nil, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`),
			"provider_http_error", 500, true, 0, "server had an error"},
		{"502 html from a proxy", status(502, map[string]string{"Retry-After": "3"}, `<html>Bad Gateway</html>`),
			"provider_http_error", 502, true, 3 * time.Second, "Bad Gateway"},
		{"429 retry-after seconds", status(429, map[string]string{"Retry-After": "7"}, `{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests","code":"rate_limit_exceeded"}}`),
			"rate_limited", 429, true, 7 * time.Second, "Rate limit reached"},
		{"429 retry-after http date", status(429, map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, `{"error":{"message":"slow down"}}`),
			"rate_limited", 429, true, 90 * time.Second, "slow down"},
		{"429 without retry-after", status(429, nil, `{"error":{"message":"quota"}}`),
			"rate_limited", 429, true, 0, "quota"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.script, tc.script, tc.script)
			_, _, err := collect(t, s.provider(t, clock.NewFake(now)), context.Background(), userReq("hi"))
			var le *llm.Error
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want *llm.Error", err, err)
			}
			if le.Kind != tc.kind || le.Status != tc.status || le.Retryable != tc.retryable || le.RetryAfter != tc.retryAfter {
				t.Errorf("error = %+v, want kind %s status %d retryable %v after %v", le, tc.kind, tc.status, tc.retryable, tc.retryAfter)
			}
			if !strings.Contains(le.Message, tc.message) {
				t.Errorf("message = %q, want it to contain %q", le.Message, tc.message)
			}
			if strings.Contains(err.Error(), "sk-test-secret") {
				t.Errorf("the error leaks the API key: %v", err)
			}
			if ok, after := llm.IsRetryable(err); ok != tc.retryable || after != tc.retryAfter {
				t.Errorf("IsRetryable = %v %v", ok, after)
			}
			if n := s.requests(); n != 1 {
				t.Errorf("%d requests: the SDK must not retry on its own", n)
			}
		})
	}
}

func TestStreamCutMidwayIsRetryable(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, r *http.Request){
		"clean end without finish or DONE": sse(delta(`{"content":"Hel"}`, ""), delta(`{"tool_calls":[{"index":0,"id":"c","function":{"name":"x","arguments":"{\"a"}}]}`, "")),
		"connection dropped": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			fmt.Fprintf(w, "data: %s\n\n", delta(`{"content":"Hel"}`, ""))
			w.(http.Flusher).Flush()
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			buf.Flush()
			conn.Close()
		},
		"half a chunk then drop": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			fmt.Fprintf(w, "data: %s\n\ndata: {\"id\":\"chatcmpl-9x\",\"choi", delta(`{"content":"Hel"}`, ""))
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
			ok, _ := llm.IsRetryable(err)
			if !ok {
				t.Fatalf("err = %v, want a retryable *llm.Error", err)
			}
			if len(evs) == 0 || evs[0].Text != "Hel" {
				t.Errorf("the partial text should have streamed before the cut: %+v", evs)
			}
			if resp.Text != "" || resp.ToolCalls != nil {
				t.Errorf("a cut stream returns no response, got %+v", resp)
			}
		})
	}
}

func TestErrorEventInStreamIsRetryable(t *testing.T) {
	s := newServer(t, sse(delta(`{"content":"Hi"}`, ""), `{"error":{"message":"The model is overloaded","type":"server_error"}}`))
	_, _, err := collect(t, s.provider(t, nil), context.Background(), userReq("hi"))
	var le *llm.Error
	if !errors.As(err, &le) || !le.Retryable || !strings.Contains(le.Message, "overloaded") {
		t.Fatalf("err = %v", err)
	}
}

func TestTransportFailureIsRetryableNetworkError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p, err := New(Config{APIKey: "k", BaseURL: "http://" + addr + "/v1", Model: "m", HTTPClient: &http.Client{Transport: &http.Transport{}}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = collect(t, p, context.Background(), userReq("hi"))
	var le *llm.Error
	if !errors.As(err, &le) || le.Kind != "network" || !le.Retryable || le.Status != 0 {
		t.Fatalf("err = %#v", err)
	}
}

func TestContextCancellationStopsTheStream(t *testing.T) {
	released := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(released)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprintf(w, "data: %s\n\n", delta(`{"content":"first"}`, ""))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a model that keeps thinking until the client goes away
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

func TestEmitErrorStopsTheStream(t *testing.T) {
	s := newServer(t, sse(delta(`{"content":"a"}`, ""), delta(`{"content":"b"}`, ""), delta(`{}`, "stop"), "[DONE]"))
	stop := errors.New("subscriber gone")
	calls := 0
	_, err := s.provider(t, nil).Stream(context.Background(), userReq("hi"), func(e llm.Event) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("err = %v after %d emits, want the emit error after 1", err, calls)
	}
}

func TestNewRequiresModel(t *testing.T) {
	if _, err := New(Config{}); err == nil {
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

func TestRefusalIsShownAsText(t *testing.T) {
	s := newServer(t, sse(delta(`{"role":"assistant","content":null,"refusal":""}`, ""), delta(`{"refusal":"I can't help with that."}`, ""), delta(`{}`, "stop"), "[DONE]"))
	_, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("x"))
	if err != nil || resp.Text != "I can't help with that." {
		t.Fatalf("%v %+v", err, resp)
	}
}

func TestCallsWithoutIndexStaySeparate(t *testing.T) {
	// Some OpenAI-compatible servers send each complete call in one chunk and omit "index".
	s := newServer(t, sse(
		delta(`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_current_time","arguments":"{\"format\":\"human\"}"}}]}`, ""),
		delta(`{"tool_calls":[{"id":"call_2","type":"function","function":{"name":"echo","arguments":"{\"text\":\"hi\"}"}}]}`, ""),
		delta(`{}`, "tool_calls"),
		"[DONE]",
	))
	_, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID != "call_1" || string(resp.ToolCalls[0].Args) != `{"format":"human"}` ||
		resp.ToolCalls[1].ID != "call_2" || string(resp.ToolCalls[1].Args) != `{"text":"hi"}` {
		t.Fatalf("calls = %+v", resp.ToolCalls)
	}
}

func TestMalformedArgumentsBecomeAJSONString(t *testing.T) {
	s := newServer(t, sse(
		delta(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\": \"unterminated"}}]}`, ""),
		delta(`{}`, "tool_calls"),
		"[DONE]",
	))
	_, resp, err := collect(t, s.provider(t, nil), context.Background(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	var text string
	if err := json.Unmarshal(resp.ToolCalls[0].Args, &text); err != nil || text != `{"text": "unterminated` {
		t.Fatalf("args = %s (%v): want the raw text as a JSON string", resp.ToolCalls[0].Args, err)
	}
}

func TestEmptyAPIKeyStillSendsTheRequest(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	s := newServer(t, sse(delta(`{"content":"hi"}`, "stop"), "[DONE]"))
	p, err := New(Config{BaseURL: s.srv.URL + "/v1", Model: "llama3.2", HTTPClient: s.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, resp, err := collect(t, p, context.Background(), userReq("x")); err != nil || resp.Text != "hi" {
		t.Fatalf("local server without a key: %v %+v", err, resp)
	}
}
