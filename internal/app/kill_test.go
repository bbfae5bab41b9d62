package app

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"parley/internal/store/pgtest"
	"parley/internal/tools"
)

// The kill-and-revive tests run the real binary (cmd/web, built once without -race) against a
// scripted Chat Completions server and a webhook receiver in this test process, kill it with
// SIGKILL at a chosen point of a turn, start it again on the same store and finish the turn.

const (
	pollEvery   = 20 * time.Millisecond
	waitAtMost  = 20 * time.Second
	webhookKey  = "kill-test-signing-key"
	gatedTool   = "open_ticket" // a webhook that requires the owner's approval
	serverTool  = "record_sale" // a webhook that runs at once
	finalAnswer = "All done: T-1 is recorded."
)

// --- the scripted model ------------------------------------------------------------------------

// modelStep answers one Chat Completions request; body is the raw request.
type modelStep func(w http.ResponseWriter, r *http.Request, body []byte)

// modelServer speaks Chat Completions streaming and answers its n-th request with script[n];
// a request past the script is answered 500 and counted, so an extra LLM call fails the test.
type modelServer struct {
	script []modelStep

	mu     sync.Mutex
	bodies [][]byte // every request to /v1/chat/completions, in order
}

func (s *modelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, raw)
	n := len(s.bodies)
	s.mu.Unlock()
	if n > len(s.script) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"message":"the test scripted no more model calls","type":"server_error"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	s.script[n-1](w, r, raw)
}

// requests returns the request bodies received so far.
func (s *modelServer) requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

// chunk writes one streamed chunk with the given delta JSON and finish reason ("" is null).
func chunk(w http.ResponseWriter, delta, finish string) {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-k\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, f)
	w.(http.Flusher).Flush()
}

// callTool streams one tool call whose arguments arrive in two fragments.
func callTool(id, name, args string) modelStep {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		chunk(w, fmt.Sprintf(`{"role":"assistant","tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]}`, id, name), "")
		for _, frag := range []string{args[:len(args)/2], args[len(args)/2:]} {
			quoted, _ := json.Marshal(frag)
			chunk(w, `{"tool_calls":[{"index":0,"function":{"arguments":`+string(quoted)+`}}]}`, "")
		}
		chunk(w, `{}`, "tool_calls")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// answer streams text in words.
func answer(text string) modelStep {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		chunk(w, `{"role":"assistant","content":""}`, "")
		for _, word := range strings.SplitAfter(text, " ") {
			b, _ := json.Marshal(word)
			chunk(w, `{"content":`+string(b)+`}`, "")
		}
		chunk(w, `{}`, "stop")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// halfAnswer streams the start of an answer, tells arrived, and then never finishes: it waits
// for the client to go away (the process is killed) or for release.
func halfAnswer(text string, arrived chan<- struct{}, release *gate) modelStep {
	return func(w http.ResponseWriter, r *http.Request, _ []byte) {
		b, _ := json.Marshal(text)
		chunk(w, `{"role":"assistant","content":`+string(b)+`}`, "")
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release.ch:
		}
		panic(http.ErrAbortHandler) // end the connection without the rest of the stream
	}
}

// gate is closed once, by the test or by its cleanup, to unblock a handler.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// --- the webhook receiver ----------------------------------------------------------------------

// receiver is a webhook target that behaves as a careful real one: it checks the signature,
// applies each Idempotency-Key once, and answers a repeated key with the result it stored.
// When blockFirst is set, the first request is applied and then never answered (its
// response is lost): it tells arrived and waits for the client to go away or for release.
type receiver struct {
	blockFirst bool
	arrived    chan struct{}
	release    *gate

	mu      sync.Mutex
	keys    []string                   // Idempotency-Key of every request, in order
	results map[string]json.RawMessage // applied keys and their results
	applied []string                   // the side effects, in order (one per key)
	bad     []string                   // requests that failed verification
}

func newReceiver(blockFirst bool) *receiver {
	return &receiver{blockFirst: blockFirst, arrived: make(chan struct{}, 1), release: newGate(), results: map[string]json.RawMessage{}}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	// The legacy signature covers the timestamp: "<webhook-timestamp>.<body>".
	mac := hmac.New(sha256.New, []byte(webhookKey))
	mac.Write([]byte(r.Header.Get("webhook-timestamp") + "."))
	mac.Write(raw)
	wantSig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	var body struct {
		ToolCallID     string          `json:"tool_call_id"`
		ConversationID string          `json:"conversation_id"`
		Tool           string          `json:"tool"`
		Arguments      json.RawMessage `json:"arguments"`
	}
	err := json.Unmarshal(raw, &body)
	rc.mu.Lock()
	rc.keys = append(rc.keys, key)
	n := len(rc.keys)
	// The key is the call's identity in the whole store (tools.Call.Key), not the bare id.
	if key == "" || err != nil || key != (tools.Call{ConversationID: body.ConversationID, ToolCallID: body.ToolCallID}).Key() ||
		!hmac.Equal([]byte(r.Header.Get("X-Webhook-Signature")), []byte(wantSig)) {
		rc.bad = append(rc.bad, fmt.Sprintf("key %q body %s err %v", key, raw, err))
		rc.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	result, seen := rc.results[key]
	if !seen {
		rc.applied = append(rc.applied, body.Tool+" "+string(body.Arguments))
		result = json.RawMessage(fmt.Sprintf(`{"ticket":"T-%d"}`, len(rc.applied)))
		rc.results[key] = result
	}
	rc.mu.Unlock()
	if rc.blockFirst && n == 1 {
		rc.arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-rc.release.ch:
		}
		panic(http.ErrAbortHandler) // applied, but the answer is lost
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(result)
}

// seen returns the keys received, the side effects applied and the requests refused.
func (rc *receiver) seen() (keys, applied, bad []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.keys...), append([]string(nil), rc.applied...), append([]string(nil), rc.bad...)
}

// --- the binary --------------------------------------------------------------------------------

// lockedBuffer is a bytes.Buffer safe for the process's output goroutine and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one run of the binary.
type proc struct {
	cmd    *exec.Cmd
	url    string
	output *lockedBuffer // stdout and stderr
	exited chan struct{} // closed when Wait returned
	err    error         // Wait's error, set before exited closes
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(waitAtMost):
		t.Fatal("the process outlived SIGKILL")
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process did not die of SIGKILL: %v", p.err)
	}
}

// killEnv is the environment of one test's runs: one store, the scripted model, the tools file.
type killEnv struct {
	bin   string
	env   []string
	token string
}

// newKillEnv writes a tools file with the gated and the plain webhook (both posting to
// hookURL, loopback allowed), creates the user "ada" and a token with the binary's own
// commands, on PostgreSQL when databaseURL is set, else on the embedded store in a fresh
// directory.
func newKillEnv(t *testing.T, databaseURL, modelURL, hookURL string) *killEnv {
	t.Helper()
	dir := t.TempDir()
	toolsFile := filepath.Join(dir, "tools.json")
	params := `{"type":"object","properties":{"item":{"type":"string","minLength":1}},"required":["item"],"additionalProperties":false}`
	file := fmt.Sprintf(`{"tools":[
 {"name":%q,"type":"webhook","description":"Open a ticket.","parameters":%s,"url":%q,
  "secret_env":"KILL_TEST_WEBHOOK_SECRET","allow_private_network":true,"approval":"requires_approval","timeout_secs":600},
 {"name":%q,"type":"webhook","description":"Record a sale.","parameters":%s,"url":%q,
  "secret_env":"KILL_TEST_WEBHOOK_SECRET","allow_private_network":true,"timeout_secs":600}
]}`, gatedTool, params, hookURL+"/tickets", serverTool, params, hookURL+"/sales")
	if err := os.WriteFile(toolsFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &killEnv{bin: buildBinary(t), env: append(os.Environ(),
		"PARLEY_ADDR=127.0.0.1:0", "PARLEY_DATA_DIR="+filepath.Join(dir, "data"), "DATABASE_URL="+databaseURL,
		"PARLEY_MODEL=openai:test-model", "OPENAI_BASE_URL="+modelURL+"/v1", "OPENAI_API_KEY=test-key",
		"ANTHROPIC_API_KEY=", "PARLEY_ENV=development", "PARLEY_TOOLS="+toolsFile, "PARLEY_CLUSTER_KEY="+testClusterKey,
		// The tests poll every pollEvery: lift the per-user API budget above that.
		"PARLEY_API_PER_MINUTE=60000", "PARLEY_API_BURST=1000",
		"KILL_TEST_WEBHOOK_SECRET=whsec_"+base64.StdEncoding.EncodeToString([]byte(webhookKey)),
	)}
	e.command(t, "a long password\n", "user", "add", "--name", "ada", "--role", "member", "--password-stdin")
	e.token = strings.TrimSpace(e.command(t, "", "token", "create", "--user", "ada"))
	return e
}

// command runs a one-shot command of the binary and returns its standard output.
func (e *killEnv) command(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env, cmd.Stdin = e.env, strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("web %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// serve starts `web serve` and returns once it says where it listens. The process is killed
// when the test ends, whatever happened; its output is logged when the test failed.
func (e *killEnv) serve(t *testing.T) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(e.bin, "serve"), output: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Env, p.cmd.Stderr = e.env, p.output
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		// The only reader of stdout: it hands over the first line and copies the rest.
		sc := bufio.NewScanner(stdout)
		line := ""
		if sc.Scan() {
			line = sc.Text()
		}
		first <- line
		_, _ = io.Copy(p.output, stdout)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("output of the binary (pid %d):\n%s", p.cmd.Process.Pid, p.output.String())
		}
	})
	select {
	case line := <-first:
		url, ok := strings.CutPrefix(line, "parley listening on ")
		if !ok {
			t.Fatalf("first line %q", line)
		}
		p.url = url
	case <-time.After(waitAtMost):
		t.Fatal("the binary did not say where it listens")
	}
	return p
}

// api returns a JSON API client for this run of the binary.
func (e *killEnv) api(p *proc) *running { return &running{url: p.url, token: e.token} }

// convJSON is the API's view of a conversation, as the tests read it.
type convJSON struct {
	Status   string `json:"status"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	ToolCalls []struct {
		ID     string          `json:"id"`
		Name   string          `json:"name"`
		Status string          `json:"status"`
		Args   json.RawMessage `json:"args"`
		Result json.RawMessage `json:"result"`
	} `json:"tool_calls"`
	Pending map[string]struct {
		Kind string `json:"kind"`
	} `json:"pending"`

	raw string // the whole answer, for failure messages
}

func (v convJSON) String() string { return v.raw }

func getConv(t *testing.T, r *running, conv string) convJSON {
	t.Helper()
	status, body := r.call(t, "GET", "/api/v1/conversations/"+conv, "")
	if status != 200 {
		t.Fatalf("get conversation: %d %v", status, body)
	}
	raw, _ := json.Marshal(body)
	var v convJSON
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	v.raw = string(raw)
	return v
}

// waitConv polls the conversation every pollEvery until ok holds, for at most waitAtMost.
func waitConv(t *testing.T, r *running, conv, what string, ok func(convJSON) bool) convJSON {
	t.Helper()
	deadline := time.Now().Add(waitAtMost)
	for {
		v := getConv(t, r, conv)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v: %s", what, waitAtMost, v)
		}
		time.Sleep(pollEvery)
	}
}

// waitChan waits for a signal from a test server.
func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitAtMost):
		t.Fatalf("no %s within %v", what, waitAtMost)
	}
}

// startTurn creates a conversation and sends text.
func startTurn(t *testing.T, r *running, text string) string {
	t.Helper()
	status, body := r.call(t, "POST", "/api/v1/conversations", `{"title":"kill test"}`)
	if status != 201 {
		t.Fatalf("create: %d %v", status, body)
	}
	conv := body["id"].(string)
	msg, _ := json.Marshal(map[string]string{"text": text})
	if status, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", string(msg)); status != 202 {
		t.Fatalf("message: %d %v", status, body)
	}
	return conv
}

// finished reports a conversation back to idle with the model's final answer last.
func finished(v convJSON) bool {
	n := len(v.Messages)
	return v.Status == "idle" && n > 0 && v.Messages[n-1].Role == "assistant" && v.Messages[n-1].Content == finalAnswer
}

// lastToolMessage returns the last message of a Chat Completions request when it is a tool
// result.
func lastToolMessage(t *testing.T, body []byte) (callID, content string) {
	t.Helper()
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    any    `json:"content"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("model request %s: %v", body, err)
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" {
		t.Fatalf("the model's last message is %q, not a tool result: %s", last.Role, body)
	}
	return last.ToolCallID, fmt.Sprint(last.Content)
}

// eachKillStore runs a kill test on the embedded store and on PostgreSQL.
func eachKillStore(t *testing.T, run func(t *testing.T, databaseURL string)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(*testing.T) string { return "" }},
		{"postgres", func(t *testing.T) string { return pgtest.NewURL(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.url(t)) })
	}
}

// testServer starts h and closes it when the test ends, after unblocking whatever waits on
// release (a handler a killed process left behind must not hold Close up).
func testServer(t *testing.T, h http.Handler, release *gate) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	if release != nil {
		t.Cleanup(release.open)
	}
	return ts
}

// --- the scenarios -----------------------------------------------------------------------------

// TestKillWhileAwaitingApproval: the model calls a gated webhook; SIGKILL while the call waits
// for approval; after a restart on the same store the conversation still awaits the same call;
// approving it runs the webhook exactly once and the turn ends with the model's answer, with
// no LLM call repeated.
func TestKillWhileAwaitingApproval(t *testing.T) {
	eachKillStore(t, func(t *testing.T, databaseURL string) {
		const callID = "call_gated_1"
		model := &modelServer{script: []modelStep{
			callTool(callID, gatedTool, `{"item":"printer"}`),
			answer(finalAnswer),
		}}
		ms := testServer(t, model, nil)
		hook := newReceiver(false)
		hs := testServer(t, hook, nil)
		env := newKillEnv(t, databaseURL, ms.URL, hs.URL)

		p := env.serve(t)
		r := env.api(p)
		conv := startTurn(t, r, "open a ticket for the printer")
		v := waitConv(t, r, conv, "awaiting the approval", func(v convJSON) bool {
			return v.Status == "awaiting" && v.Pending[callID].Kind == "approval"
		})
		if len(v.Pending) != 1 || len(v.ToolCalls) != 1 || v.ToolCalls[0].Status != "awaiting" {
			t.Fatalf("before the kill: %s", v)
		}
		p.kill9(t)

		p = env.serve(t)
		r = env.api(p)
		v = getConv(t, r, conv)
		if v.Status != "awaiting" || len(v.Pending) != 1 || v.Pending[callID].Kind != "approval" ||
			len(v.ToolCalls) != 1 || v.ToolCalls[0].ID != callID || v.ToolCalls[0].Status != "awaiting" {
			t.Fatalf("after the restart the call is not pending as it was: %s", v)
		}
		if keys, _, _ := hook.seen(); len(keys) != 0 {
			t.Fatalf("the gated webhook ran before its approval: %v", keys)
		}
		resolve := "/api/v1/conversations/" + conv + "/calls/" + callID + "/resolve"
		if status, body := r.call(t, "POST", resolve, `{"decision":"approve"}`); status != 200 || body["ok"] != true {
			t.Fatalf("approve after the restart: %d %v", status, body)
		}
		v = waitConv(t, r, conv, "finished with the model's answer", finished)
		if v.ToolCalls[0].Status != "resolved" || !strings.Contains(string(v.ToolCalls[0].Result), `"T-1"`) {
			t.Fatalf("the call after approval: %s", v)
		}

		keys, applied, bad := hook.seen()
		key := (tools.Call{ConversationID: conv, ToolCallID: callID}).Key()
		if !reflect.DeepEqual(keys, []string{key}) || len(applied) != 1 || len(bad) != 0 {
			t.Fatalf("webhook: keys %v, applied %v, refused %v; want the one key once", keys, applied, bad)
		}
		reqs := model.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d model requests, want 2 (the tool call, the answer)", len(reqs))
		}
		if id, content := lastToolMessage(t, reqs[1]); id != callID || !strings.Contains(content, "T-1") {
			t.Fatalf("the tool result sent back: %s %s", id, content)
		}
	})
}

// TestKillWhileServerCallRuns: SIGKILL while the webhook has the request and has applied it
// but not answered; after a restart the call is sent again with the same Idempotency-Key, the
// receiver answers it from what it stored (the side effect happened once), the turn ends, and
// the completed LLM call that asked for the tool is not repeated.
func TestKillWhileServerCallRuns(t *testing.T) {
	eachKillStore(t, func(t *testing.T, databaseURL string) {
		const callID = "call_sale_1"
		model := &modelServer{script: []modelStep{
			callTool(callID, serverTool, `{"item":"bike \"Comet\""}`),
			answer(finalAnswer),
		}}
		ms := testServer(t, model, nil)
		hook := newReceiver(true)
		hs := testServer(t, hook, hook.release)
		env := newKillEnv(t, databaseURL, ms.URL, hs.URL)

		p := env.serve(t)
		r := env.api(p)
		conv := startTurn(t, r, "record the sale of the bike")
		waitChan(t, hook.arrived, "webhook request")
		v := getConv(t, r, conv)
		if v.Status != "dispatching" || len(v.ToolCalls) != 1 || v.ToolCalls[0].Status != "running" {
			t.Fatalf("while the webhook runs: %s", v)
		}
		p.kill9(t)
		hook.release.open()

		p = env.serve(t)
		r = env.api(p)
		v = waitConv(t, r, conv, "finished with the model's answer", finished)
		if len(v.ToolCalls) != 1 || v.ToolCalls[0].ID != callID || v.ToolCalls[0].Status != "resolved" ||
			!strings.Contains(string(v.ToolCalls[0].Result), `"T-1"`) {
			t.Fatalf("the call after the restart: %s", v)
		}

		keys, applied, bad := hook.seen()
		key := (tools.Call{ConversationID: conv, ToolCallID: callID}).Key()
		if !reflect.DeepEqual(keys, []string{key, key}) {
			t.Fatalf("webhook keys %v, want %s (the key of %s) twice (the first attempt, the re-dispatch)", keys, key, callID)
		}
		if len(applied) != 1 || len(bad) != 0 {
			t.Fatalf("webhook applied %v, refused %v; want one side effect", applied, bad)
		}
		reqs := model.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d model requests, want 2: the completed call before the tool must not be repeated", len(reqs))
		}
		if id, content := lastToolMessage(t, reqs[1]); id != callID || !strings.Contains(content, "T-1") {
			t.Fatalf("the tool result sent back: %s %s", id, content)
		}
	})
}

// TestKillMidStream: SIGKILL while the model's answer is half streamed; after a restart that
// LLM step is asked again with the same messages, and the half answer is nowhere.
func TestKillMidStream(t *testing.T) {
	eachKillStore(t, func(t *testing.T, databaseURL string) {
		const partial = "Half an ans"
		arrived, release := make(chan struct{}, 1), newGate()
		model := &modelServer{script: []modelStep{
			halfAnswer(partial, arrived, release),
			answer(finalAnswer),
		}}
		ms := testServer(t, model, release)
		env := newKillEnv(t, databaseURL, ms.URL, "http://127.0.0.1:1")

		p := env.serve(t)
		r := env.api(p)
		conv := startTurn(t, r, "say something")
		waitChan(t, arrived, "half of the answer")
		if v := getConv(t, r, conv); v.Status != "generating" {
			t.Fatalf("while streaming: %s", v)
		}
		p.kill9(t)
		release.open()

		p = env.serve(t)
		r = env.api(p)
		v := waitConv(t, r, conv, "finished with the model's answer", finished)
		for _, m := range v.Messages {
			if strings.Contains(m.Content, partial) {
				t.Fatalf("the half answer survived: %s", v)
			}
		}
		if len(v.Messages) != 2 || v.Messages[0].Role != "user" {
			t.Fatalf("messages of %s: want the user's and the answer", v)
		}
		reqs := model.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d model requests, want 2 (the cut stream, its retry)", len(reqs))
		}
		var first, second struct{ Messages []any }
		_ = json.Unmarshal(reqs[0], &first)
		_ = json.Unmarshal(reqs[1], &second)
		if len(first.Messages) == 0 || !reflect.DeepEqual(first.Messages, second.Messages) {
			t.Fatalf("the retried step sent other messages:\n%v\n%v", first.Messages, second.Messages)
		}
	})
}
