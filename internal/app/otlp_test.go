package app

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// otlpReceiver is an OTLP/HTTP traces endpoint: it decodes every ExportTraceServiceRequest
// (protobuf, gzip or not) and keeps the spans with their resource's service.name.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	bad      []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		o.bad = append(o.bad, fmt.Sprintf("%s %s %s: %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				o.services = append(o.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// headerLog records one header of every request to a handler.
type headerLog struct {
	mu   sync.Mutex
	name string
	got  []string
	next http.Handler
}

func (h *headerLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got = append(h.got, r.Header.Get(h.name))
	h.mu.Unlock()
	h.next.ServeHTTP(w, r)
}

func (h *headerLog) values() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestOTLPTraceOfAnApprovedWebhookCall runs one approved webhook call through the real app with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at an in-test OTLP/HTTP receiver, a scripted
// OpenAI-compatible model server and a webhook receiver, both recording the traceparent they
// got. After shutdown (which flushes the exporter) the receiver holds one trace: the turn, its
// two model calls, the suspension, the Resolve and the tool run under sensible parents; the
// webhook got the tool span's traceparent and each model request its chat span's.
func TestOTLPTraceOfAnApprovedWebhookCall(t *testing.T) {
	otlp := &otlpReceiver{}
	collector := httptest.NewServer(otlp)
	defer collector.Close()
	model := &headerLog{name: "traceparent", next: &modelServer{script: []modelStep{
		callTool("call_otlp_1", gatedTool, `{"item":"a secret chair"}`),
		answer("Ticket T-1 is open."),
	}}}
	modelSrv := httptest.NewServer(model)
	defer modelSrv.Close()
	hook := &headerLog{name: "traceparent", next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ticket":"T-1"}`)
	})}
	hookSrv := httptest.NewServer(hook)
	defer hookSrv.Close()

	dir := t.TempDir()
	toolsFile := filepath.Join(dir, "tools.json")
	params := `{"type":"object","properties":{"item":{"type":"string"}},"required":["item"],"additionalProperties":false}`
	file := fmt.Sprintf(`{"tools":[{"name":%q,"type":"webhook","description":"Open a ticket.","parameters":%s,"url":%q,
  "secret_env":"OTLP_TEST_WEBHOOK_SECRET","allow_private_network":true,"approval":"requires_approval"}]}`, gatedTool, params, hookSrv.URL+"/tickets")
	if err := os.WriteFile(toolsFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": filepath.Join(dir, "data"), "PARLEY_SHUTDOWN_TIMEOUT": "10s",
		"PARLEY_MODEL": "openai:test-model", "OPENAI_BASE_URL": modelSrv.URL + "/v1", "OPENAI_API_KEY": "test-key",
		"PARLEY_TOOLS": toolsFile, "OTLP_TEST_WEBHOOK_SECRET": "whsec_" + base64.StdEncoding.EncodeToString([]byte(webhookKey)),
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	var out, errOut bytes.Buffer
	std := IO{Stdin: strings.NewReader("a long password\n"), Stdout: &out, Stderr: &errOut}
	if code := Main(ctx, []string{"user", "add", "--name", "ada", "--role", "member", "--password-stdin"}, getenv, std); code != 0 {
		t.Fatalf("user add: %d %s", code, errOut.String())
	}
	out.Reset()
	if code := Main(ctx, []string{"token", "create", "--user", "ada"}, getenv, std); code != 0 {
		t.Fatalf("token create: %d %s", code, errOut.String())
	}
	cfg, err := FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if a.tracer == nil {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT is set but the app does not trace")
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the app did not shut down within 20 s")
		}
	}
	defer stop()
	r := &running{url: a.URL(), token: strings.TrimSpace(out.String()), app: a}

	status, body := r.call(t, "POST", "/api/v1/conversations", `{"title":"traced"}`)
	if status != 201 {
		t.Fatalf("create: %d %v", status, body)
	}
	conv := body["id"].(string)
	if status, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"open a ticket"}`); status != 202 {
		t.Fatalf("message: %d %v", status, body)
	}
	waitFor := func(what string, ok func(map[string]any) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, body := r.call(t, "GET", "/api/v1/conversations/"+conv, ""); ok(body) {
				return
			}
		}
		t.Fatalf("no %s within 20 s", what)
	}
	waitFor("pending approval", func(b map[string]any) bool { p, _ := b["pending"].(map[string]any); return p["call_otlp_1"] != nil })
	if status, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/calls/call_otlp_1/resolve", `{"decision":"approve"}`); status != 200 {
		t.Fatalf("approve: %d %v", status, body)
	}
	waitFor("the end of the turn", func(b map[string]any) bool { return b["status"] == "idle" })
	stop() // flushes the batch of spans to the receiver (App.Close shuts the provider down)

	otlp.mu.Lock()
	spans, services, bad := otlp.spans, otlp.services, otlp.bad
	otlp.mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("the receiver refused exports: %v", bad)
	}
	if len(services) == 0 || services[0] != "parley" {
		t.Errorf("service.name %v, want parley", services)
	}
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.GetName()] = append(byName[s.GetName()], s)
		for _, kv := range s.GetAttributes() {
			if strings.Contains(kv.String(), "secret chair") || strings.Contains(kv.String(), "Ticket T-1") {
				t.Errorf("span %q records user data: %v", s.GetName(), kv)
			}
		}
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		if len(byName[name]) != 1 {
			names := []string{}
			for n, l := range byName {
				names = append(names, fmt.Sprintf("%s×%d", n, len(l)))
			}
			t.Fatalf("%d spans named %q; got %v", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	turn := one("invoke_agent parley")
	resolve := one("resolve " + gatedTool)
	await := one("await approval " + gatedTool)
	tool := one("execute_tool " + gatedTool)
	chats := byName["chat test-model"]
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want 2", len(chats))
	}
	if chats[0].GetStartTimeUnixNano() > chats[1].GetStartTimeUnixNano() {
		chats[0], chats[1] = chats[1], chats[0]
	}
	trace := turn.GetTraceId()
	for _, s := range spans {
		if !bytes.Equal(s.GetTraceId(), trace) {
			t.Errorf("span %q is in another trace", s.GetName())
		}
	}
	under := func(child, parent *tracepb.Span) {
		t.Helper()
		if !bytes.Equal(child.GetParentSpanId(), parent.GetSpanId()) {
			t.Errorf("%q should be a child of %q", child.GetName(), parent.GetName())
		}
	}
	if len(turn.GetParentSpanId()) != 0 {
		t.Errorf("the turn has a parent")
	}
	under(chats[0], turn)
	under(resolve, turn)
	under(await, turn)
	under(tool, resolve)
	under(chats[1], resolve)
	if l := await.GetLinks(); len(l) != 1 || !bytes.Equal(l[0].GetSpanId(), resolve.GetSpanId()) {
		t.Errorf("the suspension should link to the resolve that ended it: %v", l)
	}
	if chats[0].GetKind() != tracepb.Span_SPAN_KIND_CLIENT || spanAttr(chats[0], "gen_ai.operation.name") != "chat" ||
		spanAttr(chats[0], "gen_ai.provider.name") != "openai" || spanAttr(chats[0], "gen_ai.request.model") != "test-model" {
		t.Errorf("chat span: kind %v attributes %v", chats[0].GetKind(), chats[0].GetAttributes())
	}
	if spanAttr(tool, "gen_ai.tool.call.id") != "call_otlp_1" || spanAttr(tool, "gen_ai.tool.name") != gatedTool ||
		spanAttr(tool, "gen_ai.conversation.id") != conv || spanAttr(tool, "gen_ai.operation.name") != "execute_tool" {
		t.Errorf("tool span attributes %v", tool.GetAttributes())
	}
	if spanAttr(await, "parley.decision") != "approve" || spanAttr(await, "parley.decided_by.via") != "token" ||
		spanAttr(await, "parley.pending.kind") != "approval" || spanAttr(await, "parley.decided_by") == "" {
		t.Errorf("suspension attributes %v", await.GetAttributes())
	}
	if n := len(byName["append conversation_log"]); n < 5 {
		t.Errorf("%d append spans, want at least 5 (message, answer, decision, result, final answer)", n)
	}

	traceparent := func(s *tracepb.Span) string {
		return "00-" + hex.EncodeToString(s.GetTraceId()) + "-" + hex.EncodeToString(s.GetSpanId()) + "-01"
	}
	if got := hook.values(); len(got) != 1 || got[0] != traceparent(tool) {
		t.Errorf("the webhook got traceparent %q, want the tool span's %q", got, traceparent(tool))
	}
	if got := model.values(); len(got) != 2 || got[0] != traceparent(chats[0]) || got[1] != traceparent(chats[1]) {
		t.Errorf("the model requests got traceparent %q, want their chat spans' %q, %q", got, traceparent(chats[0]), traceparent(chats[1]))
	}
}
