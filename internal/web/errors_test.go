package web

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
	"parley/internal/store"
)

// TestStatusOfKinds pins the kind → status mapping docs/api.md documents.
func TestStatusOfKinds(t *testing.T) {
	for kind, want := range map[fault.Kind]int{
		fault.KindBadRequest: 400, fault.KindNotAuthenticated: 401, fault.KindPermissionDenied: 403,
		fault.KindNotFound: 404, fault.KindStale: 409, fault.KindConflict: 409, fault.KindTooLarge: 413,
		fault.KindUnsupportedMedia: 415, fault.KindInvalidArgs: 422, fault.KindRateLimited: 429,
		fault.KindInternal: 500, fault.KindServiceUnavailable: 503, fault.KindDenied: 422,
	} {
		if got := statusOf(kind); got != want {
			t.Errorf("%s → %d, want %d", kind, got, want)
		}
	}
	for _, k := range fault.Kinds {
		if s := statusOf(k); s < 400 {
			t.Errorf("%s maps to %d", k, s)
		}
	}
}

// TestPanicsAndInternalErrors: a panic or a plain error in a handler is a 500 whose body has a
// reference and no detail; the log has the reference and the cause.
func TestPanicsAndInternalErrors(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	var logs syncBuffer
	e.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	e.srv.echo.GET("/api/v1/boom", func(echo.Context) error { panic("kaboom in handler") }, e.srv.requireUser)
	u := e.user("ada", store.RoleMember)
	res := e.script(u).api("GET", "/api/v1/boom", "")
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d", res.StatusCode)
	}
	eb := decodeEnvelope(t, res)
	ref, _ := eb.Error.Details["ref"].(string)
	if eb.Error.Kind != fault.KindInternal || ref == "" || strings.Contains(eb.Error.Message, "kaboom") {
		t.Fatalf("envelope %+v", eb.Error)
	}
	if !strings.Contains(logs.String(), ref) || !strings.Contains(logs.String(), "kaboom in handler") {
		t.Fatalf("log lacks the reference or cause: %s", logs.String())
	}
	if strings.Contains(logs.String(), "Bearer") || strings.Contains(logs.String(), "pt_") {
		t.Fatal("the log has the token")
	}
	// A page gets the same as HTML.
	res = e.browser(u).do("GET", "/api/v1/nope", "", nil)
	if res.StatusCode != 404 {
		t.Fatalf("unknown API path: %d", res.StatusCode)
	}
	// A known path with a method it does not take: 405 with what it takes.
	res = e.script(u).api("PUT", "/api/v1/conversations", "")
	if eb := decodeEnvelope(t, res); res.StatusCode != 405 || eb.Error.Kind != fault.KindMethodNotAllowed || res.Header.Get("Allow") != "GET, POST" {
		t.Fatalf("PUT /api/v1/conversations: %d %+v Allow %q", res.StatusCode, eb.Error, res.Header.Get("Allow"))
	}
	res = e.browser(u).do("GET", "/no/such/page", "", nil)
	if body := readBody(res); res.StatusCode != 404 || !strings.Contains(body, `data-parley="error"`) {
		t.Fatalf("unknown page: %d %s", res.StatusCode, body)
	}
}

// TestRequestLog: one JSON line per request with method, path, status, duration, the user and
// the conversation; never the token, the cookie or the query string.
func TestRequestLog(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		var logs syncBuffer
		e.srv.log = slog.New(slog.NewJSONHandler(&logs, nil))
		u := e.user("ada", store.RoleMember)
		conv := e.conversation(u)
		c := e.script(u)
		readBody(c.api("GET", "/api/v1/conversations/"+conv.ID+"?secret=hunter2", ""))
		var line map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" {
				line = m
			}
		}
		if line == nil || line["method"] != "GET" || line["path"] != "/api/v1/conversations/"+conv.ID || line["status"] != float64(200) ||
			line["conversation_id"] != conv.ID || line["user_id"] != u.ID || line["duration"] == nil {
			t.Fatalf("request log %v in %s", line, logs.String())
		}
		if strings.Contains(logs.String(), c.bearer) || strings.Contains(logs.String(), "hunter2") {
			t.Fatalf("secret in the log: %s", logs.String())
		}
	})
}

// TestUnavailableDependencyIs503: a request that failed because the database did not answer (a
// refused connection, however deep in the chain, even behind the agent's Internal error) is a
// 503 unavailable with Retry-After, not a 500; a plain failure stays a 500 with a reference.
func TestUnavailableDependencyIs503(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	var logs syncBuffer
	e.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	e.srv.echo.GET("/api/v1/refused", func(echo.Context) error {
		return fault.Internal(e.srv.log, "agent: load conversation", fmt.Errorf("read log: %w", refused))
	}, e.srv.requireUser)
	e.srv.echo.GET("/api/v1/plain", func(echo.Context) error {
		return fault.Internal(e.srv.log, "agent: load conversation", fmt.Errorf("disk on fire"))
	}, e.srv.requireUser)
	u := e.user("ada", store.RoleMember)
	res := e.script(u).api("GET", "/api/v1/refused", "")
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "2" {
		t.Fatalf("a refused database: %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if eb := decodeEnvelope(t, res); eb.Error.Kind != fault.KindServiceUnavailable {
		t.Fatalf("envelope %+v", eb.Error)
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("the cause is not logged: %s", logs.String())
	}
	if res := e.script(u).api("GET", "/api/v1/plain", ""); res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("a plain failure: %d", res.StatusCode)
	}
}
