package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/static"
)

// fakeConversations stands in for the agent's Manager in handler tests: it records what the
// handlers asked and answers with what the test set. The end-to-end tests in package app run
// the real Manager.
type fakeConversations struct {
	mu         sync.Mutex
	sent       []sentMessage
	resolved   []resolution
	resolveErr error
	sendErr    error
	views      map[string]agent.View
	subs       map[string][]chan agent.Event
}

type sentMessage struct {
	conv, text string
	by         agent.Principal
}

type resolution struct {
	conv, call string
	r          agent.Resolution
	by         agent.Principal
}

var _ Conversations = (*fakeConversations)(nil)

func newFakeConversations() *fakeConversations {
	return &fakeConversations{views: map[string]agent.View{}, subs: map[string][]chan agent.Event{}}
}

func (f *fakeConversations) Send(_ context.Context, conv string, by agent.Principal, text string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sendErr != nil {
		return f.sendErr
	}
	f.sent = append(f.sent, sentMessage{conv, text, by})
	return nil
}

func (f *fakeConversations) Resolve(_ context.Context, conv, call string, r agent.Resolution, by agent.Principal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resolveErr != nil {
		return f.resolveErr
	}
	f.resolved = append(f.resolved, resolution{conv, call, r, by})
	return nil
}

func (f *fakeConversations) View(_ context.Context, conv string) (agent.View, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.views[conv]
	if !ok {
		v = agent.View{ID: conv, Status: store.StatusIdle}
	}
	return v, nil
}

func (f *fakeConversations) Subscribe(conv string) *agent.Subscription {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan agent.Event, 16)
	f.subs[conv] = append(f.subs[conv], ch)
	var once sync.Once
	return agent.NewSubscription(ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			list := f.subs[conv]
			for i, c := range list {
				if c == ch {
					f.subs[conv] = append(list[:i], list[i+1:]...)
					break
				}
			}
		})
	})
}

func (f *fakeConversations) AttachClient(string) func() { return func() {} }

// publish sends ev to every subscriber of conv; it reports how many there were.
func (f *fakeConversations) publish(conv string, ev agent.Event) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs[conv] {
		ch <- ev
	}
	return len(f.subs[conv])
}

func (f *fakeConversations) subscribers(conv string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs[conv])
}

// testEnv is a Server on a real embedded store, a fake clock and a fake agent, behind an
// httptest server.
type testEnv struct {
	t     *testing.T
	srv   *Server
	st    store.Store
	clk   *clock.Fake
	conv  *fakeConversations
	ts    *httptest.Server
	users map[string]store.User
}

func newTestEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	if cfg.PasswordCost == 0 {
		cfg.PasswordCost = bcrypt.MinCost
	}
	fc := newFakeConversations()
	srv := New(cfg, Deps{Store: st, Conversations: fc, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		// Clients keep idle keep-alive connections whose goroutines goleak would report.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return &testEnv{t: t, srv: srv, st: st, clk: clk, conv: fc, ts: ts, users: map[string]store.User{}}
}

// user creates an account directly in the store.
func (e *testEnv) user(name string, role store.Role) store.User {
	e.t.Helper()
	h, err := auth.HashPassword("password-"+name, bcrypt.MinCost)
	if err != nil {
		e.t.Fatal(err)
	}
	u, err := e.st.CreateUser(context.Background(), store.User{Name: name, Role: role, PasswordHash: h})
	if err != nil {
		e.t.Fatal(err)
	}
	e.users[name] = u
	return u
}

// token creates an API token for u.
func (e *testEnv) token(u store.User) string {
	e.t.Helper()
	secret, _, err := auth.CreateToken(context.Background(), e.st, e.clk.Now(), u.ID, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// conversation creates a conversation of u.
func (e *testEnv) conversation(u store.User) store.Conversation {
	e.t.Helper()
	c, err := e.st.CreateConversation(context.Background(), store.Conversation{OwnerID: u.ID, Title: "t", Status: store.StatusIdle})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// pendingCall logs a tool call awaiting kind in conv.
func (e *testEnv) pendingCall(conv store.Conversation, id, kind, approvers string) {
	e.t.Helper()
	approval := "auto"
	if kind == "approval" {
		approval = "requires_approval"
	}
	executor := map[string]string{"approval": "server", "elicitation": "human", "client_exec": "client"}[kind]
	cur, err := e.st.GetConversation(context.Background(), conv.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = e.st.Append(context.Background(), conv.ID, cur.LastSeq, store.Batch{
		Entries: []store.Entry{{Type: store.EntryToolCall, ToolCallID: id, Actor: "model", Data: json.RawMessage(`{"name":"send_email"}`)}},
		Calls: []store.ToolCall{{ConversationID: conv.ID, ToolCallID: id, Name: "send_email", Executor: executor, Approval: approval,
			Approvers: approvers, Status: store.CallAwaiting, PendingKind: kind, Args: json.RawMessage(`{"to":"a@example.test"}`)}},
		Status: store.StatusAwaiting,
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// client is a browser or a script talking to the test server.
type client struct {
	e      *testEnv
	hc     *http.Client
	bearer string
	csrf   string // the token a signed-in browser's forms carry
}

// anon is a browser with a cookie jar and nobody signed in.
func (e *testEnv) anon() *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// browser signs u in through the form and returns the signed-in browser.
func (e *testEnv) browser(u store.User) *client {
	e.t.Helper()
	c := e.anon()
	res := c.postForm("/login", url.Values{"username": {u.Name}, "password": {"password-" + u.Name}}, c.pageCSRF("/login"))
	if res.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("sign in %s: %d %s", u.Name, res.StatusCode, readBody(res))
	}
	c.csrf = c.pageCSRF("/tokens")
	return c
}

// script is an API client with u's Bearer token.
func (e *testEnv) script(u store.User) *client {
	c := e.anon()
	c.bearer = e.token(u)
	return c
}

var csrfInput = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// pageCSRF loads a page and returns the CSRF token its forms carry.
func (c *client) pageCSRF(path string) string {
	c.e.t.Helper()
	res := c.do("GET", path, "", nil)
	body := readBody(res)
	m := csrfInput.FindStringSubmatch(body)
	if m == nil {
		c.e.t.Fatalf("no CSRF field on %s (%d): %s", path, res.StatusCode, body)
	}
	return m[1]
}

func (c *client) do(method, path, contentType string, body io.Reader, hdr ...string) *http.Response {
	c.e.t.Helper()
	req, err := http.NewRequest(method, c.e.ts.URL+path, body)
	if err != nil {
		c.e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.e.t.Fatal(err)
	}
	return res
}

// postForm posts a form with the given CSRF token ("" sends none).
func (c *client) postForm(path string, v url.Values, csrf string) *http.Response {
	if csrf != "" {
		v.Set("_csrf", csrf)
	}
	return c.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(v.Encode()))
}

// api sends a JSON request; a cookie-authenticated client adds its CSRF header.
func (c *client) api(method, path, body string, hdr ...string) *http.Response {
	var r io.Reader
	ct := ""
	if body != "" {
		r = strings.NewReader(body)
		ct = "application/json"
	}
	if c.bearer == "" && c.csrf != "" {
		hdr = append(hdr, csrfHeader, c.csrf)
	}
	return c.do(method, path, ct, r, hdr...)
}

func readBody(res *http.Response) string {
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// decodeEnvelope reads an error envelope.
func decodeEnvelope(t *testing.T, res *http.Response) errorBody {
	t.Helper()
	body := readBody(res)
	var eb errorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil {
		t.Fatalf("not an error envelope: %q", body)
	}
	if eb.OK {
		t.Fatalf("envelope says ok: %s", body)
	}
	return eb
}

func parseForm(s string) url.Values {
	v, _ := url.ParseQuery(s)
	return v
}

// staticIndexForTest lists the embedded assets by path.
func staticIndexForTest() map[string]bool {
	out := map[string]bool{}
	for _, u := range static.Stylesheets() {
		out[strings.SplitN(strings.TrimPrefix(u, static.Prefix), "/", 2)[1]] = true
	}
	if !strings.Contains(static.URL("js/hooks.js"), "/missing/") {
		out["js/hooks.js"] = true
	}
	return out
}
