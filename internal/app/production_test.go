package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/mcpadapter/mcptest"
)

// What only production does, through the path the binary takes: PARLEY_ENV=production read by
// FromEnv, then New. Each is checked against a development App too, so the test shows the
// switch is what turns it on.

// TestProductionHeadersAndSessionCookie: in production every response tells browsers to use
// HTTPS only (HSTS), and the session cookie is __Host- bound: named __Host-parley_session,
// Secure, for Path=/, with no Domain (HttpOnly, SameSite=Lax); the cookie it set signs the user
// in. In development neither: no HSTS, and a plain parley_session cookie that is not Secure
// (the app runs on http://localhost).
func TestProductionHeadersAndSessionCookie(t *testing.T) {
	prod := startIn(t, "", t.TempDir(), true, map[string]string{"PARLEY_ENV": "production"})
	dev := startIn(t, "", t.TempDir(), true)
	for _, c := range []struct {
		name string
		r    *running
		hsts string
	}{{"production", prod, "max-age=31536000"}, {"development", dev, ""}} {
		for _, path := range []string{"/login", "/healthz", "/api/v1/conversations"} {
			res, err := http.Get(c.r.url + path)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if got := res.Header.Get("Strict-Transport-Security"); got != c.hsts {
				t.Errorf("%s: GET %s: Strict-Transport-Security %q, want %q", c.name, path, got, c.hsts)
			}
		}
	}

	sess, raw := signIn(t, prod)
	if sess == nil || sess.Name != "__Host-parley_session" || !sess.Secure || sess.Path != "/" || sess.Domain != "" ||
		strings.Contains(strings.ToLower(raw), "domain=") {
		t.Fatalf("production session cookie %+v (Set-Cookie %q): want __Host-parley_session, Secure, Path=/, no Domain", sess, raw)
	}
	if !sess.HttpOnly || sess.SameSite != http.SameSiteLaxMode {
		t.Fatalf("production session cookie %+v: want HttpOnly, SameSite=Lax", sess)
	}
	// The cookie as a browser sends it back (only over HTTPS: sent by hand here) signs in.
	req, _ := http.NewRequest("GET", prod.url+"/tokens", nil)
	req.AddCookie(&http.Cookie{Name: sess.Name, Value: sess.Value})
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a page with the production session cookie: %d, want 200", res.StatusCode)
	}

	if sess, raw := signIn(t, dev); sess == nil || sess.Name != "parley_session" || sess.Secure {
		t.Fatalf("development session cookie %+v (Set-Cookie %q): want parley_session, not Secure", sess, raw)
	}
}

// signIn signs ada (startIn's user) in through the sign-in form, and returns the session cookie
// the answer set and its Set-Cookie line.
func signIn(t *testing.T, r *running) (*http.Cookie, string) {
	t.Helper()
	res, err := http.Get(r.url + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the sign-in page: %.500s", body)
	}
	form := url.Values{"username": {"ada"}, "password": {"a long password"}, "_csrf": {string(m[1])}}
	req, _ := http.NewRequest("POST", r.url+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, ck := range res.Cookies() { // Secure ones included: a jar would not send them over http://
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	}
	out, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
	if out.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", out.StatusCode)
	}
	var sess *http.Cookie
	for _, ck := range out.Cookies() {
		if strings.Contains(ck.Name, "parley_session") {
			sess = ck
		}
	}
	raw := ""
	for _, h := range out.Header.Values("Set-Cookie") {
		if strings.Contains(h, "parley_session=") {
			raw = h
		}
	}
	return sess, raw
}

// TestProductionRefusesPlainHTTPMCPServers: a tools file naming an MCP server by an http://
// URL stops a production App from starting, with a message that asks for https; the same file
// starts a development App, whose model is offered the server's tools.
func TestProductionRefusesPlainHTTPMCPServers(t *testing.T) {
	srv := mcptest.NewServer(false)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	toolsPath := filepath.Join(t.TempDir(), "tools.json")
	file := fmt.Sprintf(`{"tools": [], "mcp_servers": [{"name": "m", "transport": "http", "url": %q, "allow_private_network": true}]}`, hs.URL)
	if err := os.WriteFile(toolsPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(production bool) (*App, error) {
		env := map[string]string{"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": t.TempDir(), "PARLEY_MODEL": "demo", "PARLEY_TOOLS": toolsPath}
		if production {
			env["PARLEY_ENV"], env["PARLEY_AUDIT_KEY"] = "production", testAuditKey
		}
		cfg, err := FromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost})
	}
	a, err := open(true)
	if err == nil {
		_ = a.Close()
		t.Fatalf("a production App started with the MCP server %s", hs.URL)
	}
	if !strings.Contains(err.Error(), "https") || !strings.Contains(err.Error(), "/mcp_servers/0/url") {
		t.Fatalf("a production App with the MCP server %s: %v, want the URL refused for not being https", hs.URL, err)
	}
	a, err = open(false)
	if err != nil {
		t.Fatalf("a development App with the MCP server %s: %v", hs.URL, err)
	}
	defer a.Close()
	if st := a.mcp.Status(); len(st) != 1 || st[0].State != mcpadapter.StateUp {
		t.Fatalf("the development App's MCP server: %+v, want it up", st)
	}
}

// TestClusterAndTokenMetrics: two Apps on one PostgreSQL (as every production deployment runs,
// alone or not) export the parley_cluster_* series, and each moves with what it counts — a
// peer seen, a request forwarded and served, notifications sent, a conversation taken over
// from a process that left, a fence after the listening session was cut — and
// parley_llm_tokens_total counts a turn's tokens.
func TestClusterAndTokenMetrics(t *testing.T) {
	dbURL := pgtest.NewURL(t)
	a := startIn(t, dbURL, t.TempDir(), true, map[string]string{"PARLEY_NODE_TTL": "1500ms", "PARLEY_ORPHAN_SCAN": "200ms"})
	b := startIn(t, dbURL, t.TempDir(), false, map[string]string{"PARLEY_NODE_TTL": "1500ms", "PARLEY_ORPHAN_SCAN": "200ms"})
	before := scrape(t, a)
	waitMetric(t, b, "each process counts the other as a peer", func(m string) bool { return metricValue(m, "parley_cluster_peers") == 1 })

	// A turn on a that waits for an approval, looked at through b: b forwards, a serves.
	_, body := a.call(t, "POST", "/api/v1/conversations", `{"title":"metrics"}`)
	conv := body["id"].(string)
	if status, body := a.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"email bob@example.com about lunch"}`); status != 202 {
		t.Fatalf("message on a: %d %v", status, body)
	}
	waitConv(t, b, conv, "awaiting the approval (seen through b)", func(v convJSON) bool { return len(v.Pending) == 1 && v.Status == "awaiting" })
	after := scrape(t, a)
	for _, name := range []string{"parley_cluster_forwards_total", "parley_cluster_served_total", "parley_cluster_notifications_total",
		"parley_cluster_takeovers_total", "parley_cluster_peers", "parley_cluster_fences_total", "parley_llm_tokens_total"} {
		if !strings.Contains(after, "# TYPE "+name+" ") {
			t.Errorf("/metrics does not export %s", name)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"parley_cluster_forwards_total", []string{`outcome="answered"`}},
		{"parley_cluster_served_total", nil},
		{"parley_cluster_notifications_total", nil},
		{"parley_llm_tokens_total", []string{`direction="input"`}},
		{"parley_llm_tokens_total", []string{`direction="output"`}},
	} {
		if was, now := metricValue(before, c.name, c.labels...), metricValue(after, c.name, c.labels...); now <= was {
			t.Errorf("%s%v: %v before the turn and the forwarded views, %v after", c.name, c.labels, was, now)
		}
	}

	// a leaves while the conversation waits: b takes it over.
	takeovers := metricValue(after, "parley_cluster_takeovers_total")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, b, "a takeover counted", func(m string) bool { return metricValue(m, "parley_cluster_takeovers_total") > takeovers })

	// b's listening session is cut: b fences (stops its conversations) and re-joins.
	fences := metricValue(scrape(t, b), "parley_cluster_fences_total")
	pool := b.app.Store().(*pgstore.Store).Pool()
	var cut bool
	if err := pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(backend_pid) FROM cluster_nodes WHERE id = $1`, b.app.node.Self()).Scan(&cut); err != nil || !cut {
		t.Fatalf("cut b's listening session: %v %v", cut, err)
	}
	waitMetric(t, b, "a fence counted", func(m string) bool { return metricValue(m, "parley_cluster_fences_total") > fences })
}

// scrape reads r's /metrics.
func scrape(t *testing.T, r *running) string {
	t.Helper()
	res, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// waitMetric scrapes r's /metrics until ok holds (20 s at most).
func waitMetric(t *testing.T, r *running, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := scrape(t, r)
		if ok(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s:\n%s", what, grepLines(m, "parley_cluster_", "parley_llm_tokens"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue sums the samples of the series name (exactly) whose labels include every one of
// labels (each written k="v"), in the Prometheus text format.
func metricValue(exposition, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, set, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(set, l) {
				match = false
			}
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil && match {
			sum += v
		}
	}
	return sum
}

func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}
