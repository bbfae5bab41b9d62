package web

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	"parley/internal/llm"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
	"parley/static"
)

// --- stores -----------------------------------------------------------------------------------

// opener opens an empty, migrated store for a test; the environment closes it.
type opener func(t testing.TB, clk clock.Clock) store.Store

// openSQLite is the embedded store in the test's temporary directory.
func openSQLite(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), sqlitestore.WithClock(clk))
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	return st
}

// pgMigrated is a database with the migrations applied, made once for the package: each
// PostgreSQL test gets a copy rather than migrating a database of its own (TestMain drops it).
var pgMigrated = pgtest.NewTemplate(func(ctx context.Context, dsn string) error {
	st, err := pgstore.Open(ctx, dsn, discardLogger())
	if err != nil {
		return err
	}
	return st.Close()
})

// openPG is PostgreSQL on a fresh database, a copy of pgMigrated, dropped when the test ends
// (pgtest).
func openPG(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	st, err := pgstore.Open(context.Background(), pgMigrated.NewURL(t), discardLogger(), pgstore.WithClock(clk))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	return st
}

// storeKinds are the stores every test of conversations runs on.
var storeKinds = []struct {
	name string
	open opener
}{{"sqlite", openSQLite}, {"postgres", openPG}}

// eachStore marks t parallel (its caller must not) and runs f as a parallel subtest on every
// store kind: every test of conversations runs on both. The tests of the HTTP layer alone
// (sign-in, CSRF, cookies, error mapping) run on SQLite only, to keep the package fast.
func eachStore(t *testing.T, f func(t *testing.T, open opener)) {
	t.Helper()
	t.Parallel()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			f(t, k.open)
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// --- the environment --------------------------------------------------------------------------

// t0 is when the agent's clock starts: its timestamps and expiries are fixed.
var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// testEnv is the web server on a real store and the real agent (its model scripted with
// llmtest), behind an httptest server. The web server and the agent have their own fake
// clocks: a test moving the server's (rate limits, heartbeats, the socket's text window) moves
// none of the agent's timers (expiries, the no-client grace), and the other way round.
type testEnv struct {
	t     *testing.T
	srv   *Server
	st    store.Store
	clk   *clock.Fake // the web server's
	aclk  *clock.Fake // the agent's and the store's
	m     *agent.Manager
	model *llmtest.Provider
	hub   *testHub // nil unless the test asked for it (withTestHub)
	// alog is what the agent logged (Info and up), e.g. "call resolved … via=session"; wlog
	// what the web server logged (requests, internal errors with their references).
	alog, wlog *syncBuffer
	ts         *httptest.Server
	users      map[string]store.User
}

// envOption adjusts the agent's configuration before it starts.
type envOption func(e *testEnv, cfg *agent.Config)

// withTestHub carries the agent's events through a testHub, which the test can hold, drop or
// make lag (e.hub).
func withTestHub() envOption {
	return func(e *testEnv, cfg *agent.Config) {
		e.hub = newTestHub(cfg.SubscriberBuffer)
		cfg.Events = e.hub
	}
}

// withAgentStore lets the agent reach the store through wrap (a counter, a failure injector).
// The web server keeps the plain store.
func withAgentStore(wrap func(store.Store) store.Store) envOption {
	return func(_ *testEnv, cfg *agent.Config) { cfg.Store = wrap(cfg.Store) }
}

// newTestEnv starts the agent on a store from open and the web server over both. Cleanup
// stops them in order: the server's streams and sockets, then the agent, then the store.
func newTestEnv(t *testing.T, open opener, cfg Config, opts ...envOption) *testEnv {
	t.Helper()
	aclk := clock.NewFake(t0)
	st := open(t, aclk)
	e := &testEnv{t: t, st: st, clk: clock.NewFake(time.Now().UTC().Truncate(time.Second)), aclk: aclk,
		model: llmtest.New(), alog: &syncBuffer{}, wlog: &syncBuffer{}, users: map[string]store.User{}}
	reg, err := tools.NewRegistry(append(tools.Builtins(tools.BuiltinDeps{Clock: aclk, Outbox: storeOutbox{st}}),
		noteTool(t), publishTool(t))...)
	if err != nil {
		t.Fatal(err)
	}
	acfg := agent.Config{Store: st, Provider: e.model, Tools: reg, Clock: aclk,
		Logger: slog.New(slog.NewTextHandler(e.alog, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	for _, o := range opts {
		o(e, &acfg)
	}
	e.m = agent.New(acfg)
	if err := e.m.Start(context.Background()); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	if cfg.PasswordCost == 0 {
		cfg.PasswordCost = bcrypt.MinCost
	}
	e.srv = New(cfg, Deps{Store: st, Agent: e.m, Clock: e.clk, Logger: slog.New(slog.NewTextHandler(e.wlog, nil))})
	e.ts = httptest.NewServer(e.srv.Handler())
	t.Cleanup(func() {
		e.srv.Shutdown()
		e.ts.Close()
		// Clients keep idle keep-alive connections whose goroutines goleak would report.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.m.Close(ctx); err != nil {
			t.Errorf("close the agent: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	return e
}

// syncBuffer is a bytes.Buffer safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// storeOutbox adapts the store's outbox to send_email, as the app does.
type storeOutbox struct{ st store.Store }

func (o storeOutbox) Send(ctx context.Context, call tools.Call, msg tools.Email) (string, error) {
	m, err := o.st.AddOutbox(ctx, store.OutboxMessage{ConversationID: call.ConversationID, ToolCallID: call.ToolCallID,
		To: msg.To, Subject: msg.Subject, Body: msg.Body})
	if err != nil {
		return "", err
	}
	return fmt.Sprint(m.ID), nil
}

// noteTool is an owner-approved server tool that takes any object: a gated call whose
// arguments may be anything JSON.
func noteTool(t testing.TB) *tools.Tool {
	t.Helper()
	tool, err := tools.New(tools.Spec{
		Name: "note", Description: "Write a note (the owner approves).", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object"}`),
		Approval:   tools.RequiresApproval, Approvers: tools.ByOwner,
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			return map[string]any{"noted": true}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// publishTool is a reviewer-gated server tool: someone who reviews, and is not the owner,
// approves each call.
func publishTool(t testing.TB) *tools.Tool {
	t.Helper()
	tool, err := tools.New(tools.Spec{
		Name: "publish", Description: "Publish a text (a reviewer approves).", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":100}},"required":["text"],"additionalProperties":false}`),
		Approval:   tools.RequiresApproval, Approvers: tools.ByReviewer,
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			return map[string]any{"published": args["text"]}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// --- people ------------------------------------------------------------------------------------

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

// as is u as the agent sees them through a session.
func as(u store.User) agent.Principal {
	return agent.Principal{UserID: u.ID, Role: u.Role, Via: "session"}
}

// token creates an API token for u.
func (e *testEnv) token(u store.User) string {
	e.t.Helper()
	secret, _, err := auth.CreateToken(context.Background(), e.st, e.clk.Now(), auth.TokenSpec{UserID: u.ID, Label: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// --- conversations, through the agent ------------------------------------------------------

// conversation creates a conversation of u titled "t".
func (e *testEnv) conversation(u store.User) agent.Summary {
	e.t.Helper()
	c, err := e.m.Create(context.Background(), as(u), "t")
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// say sends text to conv as its owner u, the model answering with steps.
func (e *testEnv) say(conv agent.Summary, u store.User, text string, steps ...llmtest.Step) {
	e.t.Helper()
	e.model.Push(steps...)
	if err := e.m.Send(context.Background(), conv.ID, as(u), text); err != nil {
		e.t.Fatalf("send %q: %v", text, err)
	}
}

// pending has the model make calls in conv (idle, owned by u) and waits until each one
// awaits its resolution: an approval, an answer or a browser's result.
func (e *testEnv) pending(conv agent.Summary, u store.User, calls ...llm.ToolCall) {
	e.t.Helper()
	e.say(conv, u, "please", llmtest.Calls(calls...))
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	e.awaitCalls(conv.ID, store.CallAwaiting, ids...)
}

// view is conv as the system sees it.
func (e *testEnv) view(conv string) agent.View {
	e.t.Helper()
	v, err := e.m.View(context.Background(), conv, agent.System)
	if err != nil {
		e.t.Fatalf("view %s: %v", conv, err)
	}
	return v
}

// await polls conv's view until ok holds (the agent works in its own goroutines) and returns it.
func (e *testEnv) await(conv, what string, ok func(agent.View) bool) agent.View {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := e.view(conv)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("conversation %s: %s did not happen within 10 s; status %s, calls %s, messages %+v",
				conv, what, v.Status, describeCalls(v), v.Messages)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func describeCalls(v agent.View) string {
	var b strings.Builder
	for _, c := range v.Calls {
		fmt.Fprintf(&b, "[%s %s %s] ", c.ID, c.Name, c.Status)
	}
	return b.String()
}

// awaitCalls waits until each call of conv has the status.
func (e *testEnv) awaitCalls(conv, status string, ids ...string) agent.View {
	e.t.Helper()
	return e.await(conv, fmt.Sprintf("calls %v %s", ids, status), func(v agent.View) bool {
		for _, id := range ids {
			if c := findCall(v, id); c == nil || c.Status != status {
				return false
			}
		}
		return true
	})
}

// awaitStatus waits until conv has the status.
func (e *testEnv) awaitStatus(conv, status string) agent.View {
	e.t.Helper()
	return e.await(conv, "status "+status, func(v agent.View) bool { return v.Status == status })
}

// call is one call of conv as it stands.
func (e *testEnv) call(conv, id string) agent.CallView {
	e.t.Helper()
	c := findCall(e.view(conv), id)
	if c == nil {
		e.t.Fatalf("no call %s in %s", id, conv)
	}
	return *c
}

// decision is the logged decision on a call: {"decision","by","role","via","reason","override",…}.
func (e *testEnv) decision(conv, id string) map[string]any {
	e.t.Helper()
	entries, err := e.st.Log(context.Background(), conv, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range entries {
		if en.Type == store.EntryDecision && en.ToolCallID == id {
			var d map[string]any
			if err := json.Unmarshal(en.Data, &d); err != nil {
				e.t.Fatal(err)
			}
			return d
		}
	}
	return nil
}

// audit is conv's audit trail, oldest first.
func (e *testEnv) audit(conv string) []store.AuditRecord {
	e.t.Helper()
	list, err := e.st.ListAudit(context.Background(), store.AuditFilter{ConversationID: conv})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
		list[i], list[j] = list[j], list[i]
	}
	return list
}

// auditOf is what the audit trail says of one call: "action by actor", in order.
func (e *testEnv) auditOf(conv, call string) []string {
	e.t.Helper()
	var out []string
	for _, a := range e.audit(conv) {
		if a.ToolCallID == call {
			out = append(out, a.Action+" by "+e.nameOf(a.ActorID))
		}
	}
	return out
}

// nameOf is the name of a user the test created ("system" and unknown ids as they are).
func (e *testEnv) nameOf(id string) string {
	for name, u := range e.users {
		if u.ID == id {
			return name
		}
	}
	return id
}

// userMessages are the texts of conv's user messages, in order.
func (e *testEnv) userMessages(conv string) []string {
	e.t.Helper()
	var out []string
	for _, m := range e.view(conv).Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// resolution decodes a resolve body.
func resolution(body string) agent.Resolution {
	var r resolveRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		panic(err)
	}
	return r.resolution()
}

// emailArgs are send_email's arguments for a message to to.
func emailArgs(to string) map[string]any {
	return map[string]any{"to": to, "subject": "lunch", "body": "See you at noon."}
}

// questionArgs are ask_user's arguments for a question with the form schema.
func questionArgs(message, schema string) map[string]any {
	return map[string]any{"message": message, "schema": json.RawMessage(schema)}
}

// --- HTTP clients -------------------------------------------------------------------------

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
	readBody(res)
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

// fetchForm posts a form as hooks.js does (X-Parley-Fetch), with the client's CSRF token, and
// decodes the JSON answer.
func (c *client) fetchForm(path string, v url.Values) (int, fetchAnswer) {
	c.e.t.Helper()
	v.Set("_csrf", c.csrf)
	res := c.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(v.Encode()),
		"X-Parley-Fetch", "1", "Accept", "application/json")
	body := readBody(res)
	var ans fetchAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		c.e.t.Fatalf("POST %s: not a fetch answer (%d): %.300s", path, res.StatusCode, body)
	}
	return res.StatusCode, ans
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

// setupToken stores a fresh setup token, as the app does at start on an empty store, and
// returns it.
func (e *testEnv) setupToken() string {
	e.t.Helper()
	token := auth.NewSecret("ps_")
	if err := e.st.SetSetting(context.Background(), setupKey, hex.EncodeToString(auth.Hash(token))); err != nil {
		e.t.Fatal(err)
	}
	return token
}
