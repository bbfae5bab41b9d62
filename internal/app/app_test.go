package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/cluster"
	"parley/internal/store"
	"parley/internal/store/pgtest"
)

// testClusterKey is the cluster key of the tests' processes on PostgreSQL.
var testClusterKey = base64.StdEncoding.EncodeToString(cluster.NewKey())

// testAuditKey is the audit chain's key of the tests' production Apps (development makes one).
var testAuditKey = "the tests' audit key: 32 bytes or more, not a secret"

// running is an App started by a test, with a token of its member "ada".
type running struct {
	url, token string
	app        *App
	stop       func() error // cancels Run and returns its error; fails if shutdown overruns
}

func start(t *testing.T, databaseURL string) *running {
	return startIn(t, databaseURL, t.TempDir(), true)
}

// startIn starts an App on dataDir, creating the user first when newUser.
func startIn(t *testing.T, databaseURL, dataDir string, newUser bool, extraEnv ...map[string]string) *running {
	t.Helper()
	env := map[string]string{
		"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": dataDir, "DATABASE_URL": databaseURL,
		"PARLEY_MODEL": "demo", "PARLEY_SHUTDOWN_TIMEOUT": "10s",
	}
	if databaseURL != "" {
		env["PARLEY_CLUSTER_KEY"] = testClusterKey // the Apps of one test are one cluster
	}
	for _, extra := range extraEnv {
		for k, v := range extra {
			env[k] = v
		}
	}
	if env["PARLEY_ENV"] == "production" && env["PARLEY_AUDIT_KEY"] == "" {
		env["PARLEY_AUDIT_KEY"] = testAuditKey // production refuses to start without one
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	var out, errOut bytes.Buffer
	std := IO{Stdin: strings.NewReader("a long password\n"), Stdout: &out, Stderr: &errOut}
	if newUser {
		// A reviewer: the tests read her pending approvals from GET /api/v1/approvals, which
		// members do not have (their calls wait on their conversations' pages).
		if code := Main(ctx, []string{"user", "add", "--name", "ada", "--role", "reviewer", "--password-stdin"}, getenv, std); code != 0 {
			t.Fatalf("user add: %d %s", code, errOut.String())
		}
		out.Reset()
	}
	if code := Main(ctx, []string{"token", "create", "--user", "ada"}, getenv, std); code != 0 {
		t.Fatalf("token create: %d %s", code, errOut.String())
	}
	token := strings.TrimSpace(out.String())
	cfg, err := FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stopped := false
	var runErr error
	stop := func() error {
		if stopped {
			return runErr
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("the app did not shut down within 15 s")
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &running{url: a.URL(), token: token, app: a, stop: stop}
}

func (r *running) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, r.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+r.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %v", method, path, res.StatusCode, err)
	}
	return res.StatusCode, out
}

// entries follows a conversation's event stream and delivers the log entries' types.
func (r *running) entries(t *testing.T, conv string) (<-chan string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", r.url+"/api/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+r.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("events: %v", err)
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[7:]
			case strings.HasPrefix(line, "data: ") && name == "entry":
				var e struct{ Type string }
				_ = json.Unmarshal([]byte(line[6:]), &e)
				ch <- e.Type
			case strings.HasPrefix(line, "data: ") && name == "shutdown":
				ch <- "shutdown"
			}
		}
	}()
	return ch, res
}

func waitEntry(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before %s", want)
			}
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %s entry within 20 s", want)
		}
	}
}

// TestEndToEnd completes a demo turn with a gated send_email through the JSON API, on the
// embedded store and on PostgreSQL: message → the call waits for approval → approve → the
// email is in the outbox and the model summed up; a second approval is stale; shutting down
// ends the open event stream and Run returns in time.
func TestEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(*testing.T) string { return "" }},
		{"postgres", func(t *testing.T) string { return pgtest.NewURL(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, tc.url(t))
			status, body := r.call(t, "POST", "/api/v1/conversations", `{"title":"lunch"}`)
			if status != 201 {
				t.Fatalf("create: %d %v", status, body)
			}
			conv := body["id"].(string)
			events, stream := r.entries(t, conv)
			defer stream.Body.Close()
			if status, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"email bob@example.com about lunch"}`); status != 202 {
				t.Fatalf("message: %d %v", status, body)
			}
			waitEntry(t, events, "tool_call")
			var callID string
			for deadline := time.Now().Add(20 * time.Second); callID == "" && time.Now().Before(deadline); {
				_, body = r.call(t, "GET", "/api/v1/conversations/"+conv, "")
				for id, p := range body["pending"].(map[string]any) {
					if p.(map[string]any)["kind"] == "approval" {
						callID = id
					}
				}
				if callID == "" {
					waitEntry(t, events, "assistant_message") // the turn's text lands after the call
				}
			}
			if callID == "" || body["status"] != "awaiting" {
				t.Fatalf("no pending approval: %v", body)
			}
			_, approvals := r.call(t, "GET", "/api/v1/approvals", "")
			if list := approvals["approvals"].([]any); len(list) != 1 || list[0].(map[string]any)["tool_call_id"] != callID {
				t.Fatalf("approvals: %v", approvals)
			}
			resolve := "/api/v1/conversations/" + conv + "/calls/" + callID + "/resolve"
			if status, body := r.call(t, "POST", resolve, `{"action":"accept"}`); status != 422 {
				t.Fatalf("wrong kind of resolution: %d %v", status, body)
			}
			if status, body := r.call(t, "POST", resolve, `{"decision":"approve"}`); status != 200 || body["ok"] != true {
				t.Fatalf("approve: %d %v", status, body)
			}
			if status, body := r.call(t, "POST", resolve, `{"decision":"approve"}`); status != 409 || body["error"].(map[string]any)["kind"] != "stale" {
				t.Fatalf("second approve: %d %v", status, body)
			}
			waitEntry(t, events, "tool_result")
			waitEntry(t, events, "assistant_message")
			_, body = r.call(t, "GET", "/api/v1/conversations/"+conv, "")
			calls := body["tool_calls"].([]any)
			call := calls[0].(map[string]any)
			if call["status"] != "resolved" || call["result"].(map[string]any)["ok"] != true {
				t.Fatalf("call after approval: %v", call)
			}
			out, err := r.app.Store().ListOutbox(context.Background(), conv)
			if err != nil || len(out) != 1 || out[0].To != "bob@example.com" {
				t.Fatalf("outbox: %v %+v", err, out)
			}
			if status, _ := r.call(t, "GET", "/healthz", ""); status != 200 {
				t.Fatalf("healthz: %d", status)
			}
			// Shutdown with the stream still open.
			began := time.Now()
			if err := r.stop(); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if d := time.Since(began); d > 5*time.Second {
				t.Fatalf("shutdown took %v with a stream open", d)
			}
			waitEntry(t, events, "shutdown")
		})
	}
}

func httpGet(url string) (int, error) {
	res, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// TestApprovalSurvivesRestart: a call awaiting approval when the app stops is still pending
// after it starts again on the same data, and approving it then completes the turn.
func TestApprovalSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	r := startIn(t, "", dir, true)
	_, body := r.call(t, "POST", "/api/v1/conversations", "")
	conv := body["id"].(string)
	events, stream := r.entries(t, conv)
	r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"email bob@example.com about lunch"}`)
	waitEntry(t, events, "assistant_message")
	stream.Body.Close()
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	r = startIn(t, "", dir, false)
	_, approvals := r.call(t, "GET", "/api/v1/approvals", "")
	list := approvals["approvals"].([]any)
	if len(list) != 1 {
		t.Fatalf("after restart: %v", approvals)
	}
	callID := list[0].(map[string]any)["tool_call_id"].(string)
	events, stream = r.entries(t, conv)
	defer stream.Body.Close()
	if status, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/calls/"+callID+"/resolve", `{"decision":"approve"}`); status != 200 {
		t.Fatalf("approve after restart: %d %v", status, body)
	}
	waitEntry(t, events, "tool_result")
	out, err := r.app.Store().ListOutbox(context.Background(), conv)
	if err != nil || len(out) != 1 {
		t.Fatalf("outbox: %v %+v", err, out)
	}
}

// syncWriter is a buffer Run may write to while the test reads it.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestSetupLinkOnAnEmptyStore: a fresh deployment is nobody's until its operator uses the
// one-time link the app prints on its console: sign-up is closed, the link makes the first admin,
// and then it is spent.
func TestSetupLinkOnAnEmptyStore(t *testing.T) {
	env := map[string]string{"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": t.TempDir(), "PARLEY_MODEL": "demo"}
	cfg, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	console := &syncWriter{}
	a, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost, Console: console})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	link := regexp.MustCompile(`http://\S+/setup\?token=\S+`)
	deadline := time.Now().Add(10 * time.Second)
	for !link.MatchString(console.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no setup link on the console: %q", console.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	setup := link.FindString(console.String())
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := hc.Get(a.URL() + "/signup")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-up on an empty store: %d", res.StatusCode)
	}
	res, err = hc.Get(setup)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	csrf := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindStringSubmatch(string(page))
	if res.StatusCode != http.StatusOK || csrf == nil {
		t.Fatalf("the setup page: %d", res.StatusCode)
	}
	token := strings.SplitN(setup, "token=", 2)[1]
	res, err = hc.PostForm(a.URL()+"/setup", url.Values{"token": {token}, "username": {"root"}, "password": {"a long password"}, "_csrf": {csrf[1]}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup: %d", res.StatusCode)
	}
	users, err := a.Store().ListUsers(context.Background())
	if err != nil || len(users) != 1 || users[0].Role != store.RoleAdmin {
		t.Fatalf("users %+v %v", users, err)
	}
	res, err = http.Get(setup)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("the spent link: %d", res.StatusCode)
	}
}

// TestExpiredSessionsAreSwept: a running app deletes expired session rows (at start, then
// hourly), so the table does not grow with every sign-in ever made.
func TestExpiredSessionsAreSwept(t *testing.T) {
	env := map[string]string{"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": t.TempDir(), "PARLEY_MODEL": "demo"}
	cfg, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncWriter{}
	a, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), PasswordCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	u, err := a.Store().CreateUser(context.Background(), store.User{Name: "ada", PasswordHash: []byte("h")})
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{time.Now().Add(-time.Minute), time.Now().Add(time.Hour)} {
		if err := a.Store().CreateSession(context.Background(), store.Session{TokenHash: []byte{byte(i)}, UserID: u.ID, CSRF: "c", ExpiresAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), `msg="purged expired sessions" count=1`) {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep in the log: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Only the expired one went (count=1 above); the live one stays.
	if _, err := a.Store().SessionByHash(context.Background(), []byte{1}); err != nil {
		t.Fatalf("the live session: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
