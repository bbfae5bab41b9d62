package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/llm/openai"
	"parley/internal/store"
)

// chatServer speaks Chat Completions streaming: the first request is refused with 429 and a
// Retry-After, the second is answered with a send_email call whose arguments arrive in
// fragments, and any request that carries a tool result is answered with streamed text.
type chatServer struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	n := len(s.bodies)
	s.mu.Unlock()
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	if n == 1 {
		w.Header().Set("Retry-After", "2")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta string, finish string) {
		f := "null"
		if finish != "" {
			f = `"` + finish + `"`
		}
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, f)
		w.(http.Flusher).Flush()
	}
	if strings.Contains(string(raw), `"role":"tool"`) {
		chunk(`{"role":"assistant","content":"Sent "}`, "")
		chunk(`{"content":"it."}`, "")
		chunk(`{}`, "stop")
	} else {
		chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"send_email","arguments":""}}]}`, "")
		for _, frag := range []string{`{\"to\":\"bob@example.test\",`, `\"subject\":\"Hi\",`, `\"body\":\"Lunch?\"}`} {
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"`+frag+`"}}]}`, "")
		}
		chunk(`{}`, "tool_calls")
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

func TestLoopOverRealHTTPWithTheOpenAIClient(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		srv := &chatServer{}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		prov, err := openai.New(openai.Config{APIKey: "test", BaseURL: ts.URL + "/v1", Model: "m", HTTPClient: ts.Client()})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, open, newScripted(), emailTools, func(c *Config) { c.Provider = prov; c.RetryBase = time.Second })
		e.send("email bob")
		// The 429 is retried after its Retry-After on the loop's clock.
		e.next("llm retry", func(ev Event) bool { return ev.Type == EventStatus && strings.Contains(string(ev.Data), "retry_at") })
		e.clk.Advance(2 * time.Second)
		e.waitCall("call_1", store.CallAwaiting)
		if p := e.view().Pending()["call_1"]; p.PendingKind != "approval" {
			t.Fatalf("pending %+v", p)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "call_1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.Messages[len(v.Messages)-1].Content != "Sent it." {
			t.Fatalf("messages %+v", v.Messages)
		}
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 || out[0].To != "bob@example.test" {
			t.Fatalf("outbox %+v", out)
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if len(srv.bodies) != 3 {
			t.Fatalf("%d requests, want 429 + call + answer", len(srv.bodies))
		}
		msgs, _ := srv.bodies[2]["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		if last["role"] != "tool" || last["tool_call_id"] != "call_1" || !strings.Contains(fmt.Sprint(last["content"]), `"ok":true`) {
			t.Fatalf("the tool result sent back: %v", last)
		}
		toolsSent, _ := srv.bodies[2]["tools"].([]any)
		if len(toolsSent) != 3 {
			t.Fatalf("tools sent %v", toolsSent)
		}
	})
}
