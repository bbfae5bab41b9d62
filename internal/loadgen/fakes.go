package loadgen

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// ModelServer is a fake OpenAI-compatible model for the approvals workload, served over HTTP
// (POST {base}/chat/completions, streamed as Server-Sent Events, like the real API): a
// conversation whose last user message is "email bob: <body>" and has no tool result yet gets a
// deliver_email call with {"to":"bob","body":<body>}; once a tool result is in the messages it
// answers the text "sent". It is the peer benchmarks' fake model, moved behind HTTP.
type ModelServer struct {
	srv   *http.Server
	ln    net.Listener
	calls atomic.Int64
	ids   atomic.Int64
}

// StartModelServer listens on a loopback port; Close stops it.
func StartModelServer() (*ModelServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("model server: %w", err)
	}
	m := &ModelServer{ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	m.srv = &http.Server{Handler: mux}
	go func() { _ = m.srv.Serve(ln) }() // ends when Close closes the listener
	return m, nil
}

// BaseURL is what OPENAI_BASE_URL should say.
func (m *ModelServer) BaseURL() string { return "http://" + m.ln.Addr().String() + "/v1" }

// Calls is how many chat requests it answered.
func (m *ModelServer) Calls() int64 { return m.calls.Load() }

// Close stops the server and its connections.
func (m *ModelServer) Close() error { return m.srv.Close() }

var emailRe = regexp.MustCompile(`^email bob: (.+)$`)

type chatRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// messageText reads a message's content: a string or an array of text parts.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (m *ModelServer) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
		return
	}
	m.calls.Add(1)
	var body string
	toolResult := false
	for _, msg := range req.Messages {
		switch msg.Role {
		case "user":
			if sm := emailRe.FindStringSubmatch(strings.TrimSpace(messageText(msg.Content))); sm != nil {
				body, toolResult = sm[1], false
			}
		case "tool":
			toolResult = true
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 0, "model": "load",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	switch {
	case body != "" && !toolResult:
		args, _ := json.Marshal(map[string]string{"to": "bob", "body": body})
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"index": 0, "id": fmt.Sprintf("call_%d", m.ids.Add(1)), "type": "function",
			"function": map[string]any{"name": "deliver_email", "arguments": string(args)},
		}}}, nil)
		chunk(map[string]any{}, "tool_calls")
	default:
		chunk(map[string]any{"role": "assistant", "content": "sent"}, nil)
		chunk(map[string]any{}, "stop")
	}
	fmt.Fprint(w, `data: {"id":"chatcmpl-load","object":"chat.completion.chunk","created":0,"model":"load","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}}`+"\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Receiver is the webhook the gated deliver_email tool calls: it answers 200 with a small JSON
// result and keeps, per call, the arguments' body, so a run can check that every approved call
// ran exactly once (the peers' outbox check).
type Receiver struct {
	srv *http.Server
	ln  net.Listener

	mu     sync.Mutex
	calls  int
	bodies map[[32]byte]int // guarded by mu: how often each body arrived
	keys   map[string]bool  // guarded by mu: distinct Idempotency-Keys
}

// StartReceiver listens on a loopback port; Close stops it.
func StartReceiver() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	rc := &Receiver{ln: ln, bodies: map[[32]byte]int{}, keys: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /send_email", rc.handle)
	rc.srv = &http.Server{Handler: mux}
	go func() { _ = rc.srv.Serve(ln) }() // ends when Close closes the listener
	return rc, nil
}

// URL is the webhook's address.
func (rc *Receiver) URL() string { return "http://" + rc.ln.Addr().String() + "/send_email" }

// Close stops the receiver.
func (rc *Receiver) Close() error { return rc.srv.Close() }

// Counts returns the calls received, the distinct bodies and the distinct idempotency keys.
func (rc *Receiver) Counts() (calls, bodies, keys int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls, len(rc.bodies), len(rc.keys)
}

func (rc *Receiver) handle(w http.ResponseWriter, r *http.Request) {
	var p struct {
		Arguments struct {
			Body string `json:"body"`
		} `json:"arguments"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&p); err != nil || p.Arguments.Body == "" {
		http.Error(w, `{"error":"want arguments.body"}`, http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.calls++
	rc.bodies[sha256.Sum256([]byte(p.Arguments.Body))]++
	rc.keys[r.Header.Get("Idempotency-Key")] = true
	n := rc.calls
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"msg-%d","status":"queued"}`, n)
}
