package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// schemaStore reports a chosen schema version pair, or an error, to the readiness check.
type schemaStore struct {
	store.Store
	have, want int
	err        error
}

func (s schemaStore) SchemaVersion(context.Context) (int, int, error) { return s.have, s.want, s.err }

// TestReadyz: ready only when the store answers and its schema is the binary's; each failure
// says why, with 503.
func TestReadyz(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	cases := []struct {
		name   string
		st     store.Store
		status int
		says   string
	}{
		{"migrated", e.st, 200, `"ok":true`},
		{"schema behind", schemaStore{Store: e.st, have: 3, want: 4}, 503, "web migrate"},
		{"schema too new", schemaStore{Store: e.st, have: 5, want: 4}, 503, "newer than this binary"},
		{"store down", schemaStore{Store: e.st, err: io.ErrUnexpectedEOF}, 503, "does not answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(Config{}, Deps{Store: tc.st, Agent: e.m, Clock: e.clk, Logger: discardLogger()})
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("readyz: %d %s, want %d with %q", rec.Code, rec.Body.String(), tc.status, tc.says)
			}
		})
	}
}

// TestMetricsEndpoint: /metrics answers anyone (no session, no token) in the Prometheus text
// format with Parley's series, the page sockets' among them, and the process's memory.
func TestMetricsEndpoint(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	SocketsOpen.Add(2)
	defer SocketsOpen.Add(-2)
	res := e.anon().do("GET", "/metrics", "", nil)
	body := readBody(res)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		"parley_sockets 2", `parley_dropped_frames_total{where="socket"}`, "parley_live_actors",
		`parley_pending_calls{kind="approval"}`, "process_resident_memory_bytes", "go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestRequestLogIDsAndProbes: a resolve's log line carries the conversation and the tool call;
// a successful probe or scrape is logged only at debug level.
func TestRequestLogIDsAndProbes(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		var logs syncBuffer
		e.srv.log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		u := e.user("ada", store.RoleMember)
		conv := e.conversation(u)
		e.pending(conv, u, llmtest.Call("call_1", "send_email", emailArgs("bob@example.com")))
		e.model.Push(llmtest.Reply("Sent."))
		c := e.script(u)
		res := c.api("POST", "/api/v1/conversations/"+conv.ID+"/calls/call_1/resolve", `{"decision":"approve"}`)
		if body := readBody(res); res.StatusCode != http.StatusOK {
			t.Fatalf("resolve: %d %s", res.StatusCode, body)
		}
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if r := e.anon().do("GET", p, "", nil); r.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", p, r.StatusCode)
			} else {
				readBody(r)
			}
		}
		var resolve map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) != nil || m["msg"] != "request" {
				continue
			}
			if probe(m["path"].(string)) {
				t.Errorf("a successful probe was logged at info: %s", l)
			}
			if strings.HasSuffix(m["path"].(string), "/resolve") {
				resolve = m
			}
		}
		if resolve == nil || resolve["conversation_id"] != conv.ID || resolve["tool_call_id"] != "call_1" || resolve["status"] != float64(200) {
			t.Fatalf("resolve log line %v in %s", resolve, logs.String())
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
	})
}
