package browsertest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/app"
	"parley/internal/auth"
	"parley/internal/store"
	"parley/internal/tools/mcpadapter/mcptest"
)

// wait bounds every wait for the page; a click → socket → DOM round trip takes ~0.15 s.
const wait = 15 * time.Second

// repoRoot is the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// requireChromium finds Chromium, installing Debian's package with the repository's script
// when it is missing. It fails (never skips) when there is still none: the browser tests are
// part of CI, and a silently skipped one would hide a broken page.
func requireChromium(t *testing.T, root string) {
	t.Helper()
	find := func() bool {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if _, err := exec.LookPath(name); err == nil {
				return true
			}
		}
		return false
	}
	if find() {
		return
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "ensure-chromium.sh")).CombinedOutput()
	if err != nil || !find() {
		t.Fatalf("Chromium is required for the browser tests (scripts/ensure-chromium.sh: %v)\n%s", err, out)
	}
}

// harness is the app on 127.0.0.1:0 with the embedded store and the demo model, and the
// package's shared headless Chromium (sharedBrowser), in which its tabs open browser contexts of
// their own.
type harness struct {
	t         *testing.T
	url       string
	artifacts string
	root      context.Context // the browser's first tab

	mu       sync.Mutex
	problems []string // script exceptions and console errors seen in any tab; guarded by mu
	shot     int
}

// harnessOption adjusts the app a harness starts: its environment and its users.
type harnessOption func(env map[string]string, users *[]harnessUser)

// harnessUser is an account the harness creates (password "password-" + name).
type harnessUser struct{ name, role string }

// withEnv sets variables of the app's environment.
func withEnv(kv map[string]string) harnessOption {
	return func(env map[string]string, _ *[]harnessUser) {
		for k, v := range kv {
			env[k] = v
		}
	}
}

// withUser adds an account beside ann (member) and rita (reviewer).
func withUser(name, role string) harnessOption {
	return func(_ map[string]string, users *[]harnessUser) { *users = append(*users, harnessUser{name, role}) }
}

func newHarness(t *testing.T, hopts ...harnessOption) *harness {
	t.Helper()
	root := repoRoot(t)
	requireChromium(t, root)
	env := map[string]string{"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": t.TempDir(), "PARLEY_MODEL": "demo",
		"PARLEY_SHUTDOWN_TIMEOUT": "10s"}
	users := []harnessUser{{"ann", "member"}, {"rita", "reviewer"}}
	for _, o := range hopts {
		o(env, &users)
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	cfg, err := app.FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	addUsers(t, cfg, users)
	a, err := app.New(ctx, cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("app run: %v", err)
		}
	})
	waitHealthy(t, a.URL())

	first, err := sharedBrowser()
	if err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	artifacts := filepath.Join(root, "test-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, url: a.URL(), artifacts: artifacts, root: first}
}

// addUsers creates the harness's accounts in the app's store before it starts. The hashes
// are bcrypt's at its lowest cost, as the app's own PasswordCost option makes them in tests:
// "user add" (tested in internal/app) hashes at the production cost, which made every harness
// and every sign-in spend seconds of a core under -race.
func addUsers(t *testing.T, cfg app.Config, users []harnessUser) {
	t.Helper()
	ctx := context.Background()
	st, err := app.OpenStore(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	defer st.Close()
	for _, u := range users {
		hash, err := auth.HashPassword("password-"+u.name, bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateUser(ctx, store.User{Name: u.name, Role: store.Role(u.role), PasswordHash: hash, CreatedAt: time.Now()}); err != nil {
			t.Fatalf("add user %s: %v", u.name, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatalf("close the store: %v", err)
	}
}

// chromium is the package's one headless Chromium, started by the first harness that needs it
// and stopped by TestMain. Every harness shares it; each of its tabs lives in a browser
// context of its own (its own cookies, storage and permissions), so tests on different apps
// cannot see each other's state.
var chromium struct {
	once   sync.Once
	first  context.Context // the browser's first tab, the parent of every other
	err    error
	cancel []context.CancelFunc
}

// sharedBrowser starts Chromium once and returns its first tab.
func sharedBrowser() (context.Context, error) {
	chromium.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.NoSandbox, chromedp.WindowSize(1100, 1000))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		first, cancelFirst := chromedp.NewContext(alloc)
		chromium.cancel = []context.CancelFunc{cancelFirst, cancelAlloc}
		chromium.first = first
		chromium.err = chromedp.Do(first)
	})
	return chromium.first, chromium.err
}

// parallel is how many browser tests run at once unless -test.parallel says otherwise. The
// tests mostly wait (the demo model's pace, count_down's seconds, socket round trips): a run
// uses about a third of the wall time in CPU, so GOMAXPROCS (2 in CI) would leave the cores
// idle.
const parallel = 4

// TestMain runs up to parallel browser tests at once, and stops the shared Chromium (if a test
// started it) once every test has run.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && goruntime.GOMAXPROCS(0) < parallel {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	for _, cancel := range chromium.cancel {
		cancel()
	}
	os.Exit(code)
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		res, err := http.Get(url + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond) // polling a server that is starting; nothing to wait on
	}
	t.Fatal("the app never answered /healthz")
}

// watch records the tab's uncaught exceptions and console errors (a CSP refusal is one), so a
// page that half-works still fails the test. Failed network loads are left out: the app
// answers 409 and 422 on purpose.
func (h *harness) watch(ctx context.Context) {
	h.t.Helper()
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error:"
			for _, a := range e.Args {
				msg += " " + string(a.Value) + a.Description
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level != cdplog.EntryLevelError || e.Entry.Source == cdplog.EntrySourceNetwork {
				return
			}
			msg = fmt.Sprintf("console %s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)
		default:
			return
		}
		h.mu.Lock()
		h.problems = append(h.problems, msg)
		h.mu.Unlock()
	})
	if err != nil {
		h.t.Fatalf("listen: %v", err)
	}
}

// checkConsole fails the test for every problem watch saw.
func (h *harness) checkConsole() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.problems {
		h.t.Errorf("page problem: %s", p)
	}
}

// tab is one browser tab.
type tab struct {
	h   *harness
	ctx context.Context
}

// browserFor opens a tab in a fresh browser context (its own cookies) signed in as name.
func (h *harness) browserFor(name string) *tab {
	h.t.Helper()
	tb := h.signedOut()
	tb.do(chromedp.Navigate(h.url+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), name),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), "password-"+name),
		chromedp.Submit(chromedp.CSS(`input[name="password"]`)))
	tb.until(`location.pathname === "/conversations"`)
	return tb
}

// signedOut opens a tab in a browser context of its own, signed in as nobody.
func (h *harness) signedOut() *tab {
	h.t.Helper()
	ctx, cancel := chromedp.NewContext(h.root, chromedp.WithNewBrowserContext())
	h.t.Cleanup(cancel)
	// The tab lives as long as the context of its first action: open it on ctx itself, never on
	// a context with a timeout.
	if err := chromedp.Do(ctx); err != nil {
		h.t.Fatalf("open tab: %v", err)
	}
	h.watch(ctx)
	return &tab{h: h, ctx: ctx}
}

// another opens a second tab in the same browser context (same cookies).
func (tb *tab) another() *tab {
	ctx, cancel := chromedp.NewContext(tb.ctx)
	tb.h.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.h.t.Fatalf("open tab: %v", err)
	}
	tb.h.watch(ctx)
	return &tab{h: tb.h, ctx: ctx}
}

func (tb *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	tb.h.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.h.t.Fatalf("browser: %v", err)
	}
}

// until polls a JavaScript predicate in the page until it is true. It evaluates from Go rather
// than with chromedp.Poll, whose in-page poll does not survive a navigation (a form post).
func (tb *tab) until(predicate string) {
	tb.h.t.Helper()
	deadline := time.Now().Add(wait)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(tb.ctx, 2*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](predicate))
		cancel()
		if err == nil && ok {
			return
		}
		lastErr = err
		time.Sleep(15 * time.Millisecond) // the page changes on its own; nothing to wait on but time
	}
	dctx, dcancel := context.WithTimeout(tb.ctx, 3*time.Second)
	defer dcancel()
	text, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText.slice(0, 3000) : "")`))
	tb.shot("failure")
	tb.h.t.Fatalf("waiting for %s (last error %v)\npage:\n%s", predicate, lastErr, text)
}

// eval evaluates an expression in the page.
func eval[T any](tb *tab, expr string) T {
	tb.h.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.h.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot saves a full-page screenshot as test-artifacts/NN-name.png.
func (tb *tab) shot(name string) {
	tb.h.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.h.t.Logf("screenshot %s: %v", name, err)
		return
	}
	tb.h.shot++
	path := filepath.Join(tb.h.artifacts, fmt.Sprintf("%02d-%s.png", tb.h.shot, name))
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		tb.h.t.Logf("write %s: %v", path, err)
	}
}

// readmeShot saves what the tab's viewport shows as test-artifacts/readme-screenshot.png and,
// when PARLEY_UPDATE_SCREENSHOT=1, as docs/screenshot.png, the README's picture (a plain run
// leaves the repository alone: the picture holds times and ids that change every run).
func (tb *tab) readmeShot() {
	tb.h.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.h.t.Errorf("README screenshot: %v", err)
		return
	}
	paths := []string{filepath.Join(tb.h.artifacts, "readme-screenshot.png")}
	if os.Getenv("PARLEY_UPDATE_SCREENSHOT") == "1" {
		paths = append(paths, filepath.Join(filepath.Dir(tb.h.artifacts), "docs", "screenshot.png"))
	}
	for _, p := range paths {
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			tb.h.t.Errorf("write %s: %v", p, err)
		}
	}
}

// newConversation starts a conversation from the list and waits for its live socket.
func (tb *tab) newConversation(title string) {
	tb.do(chromedp.Navigate(tb.h.url+"/conversations"),
		chromedp.SendKeys(chromedp.CSS(`form[data-parley="new-conversation"] input[name="title"]`), title),
		chromedp.Click(chromedp.CSS(`form[data-parley="new-conversation"] button[type="submit"]`)))
	tb.until(`location.pathname.startsWith("/conversations/") && document.documentElement.dataset.parleySocket === "open"`)
}

// say sends a message through the composer.
func (tb *tab) say(text string) {
	tb.do(chromedp.SendKeys(chromedp.CSS(`form[data-parley="composer"] textarea[name="text"]`), text),
		chromedp.Click(chromedp.CSS(`form[data-parley="composer"] button[type="submit"]`)))
}

// q quotes s as a JavaScript string.
func q(s string) string { return strconv.Quote(s) }

// newestCallID waits for a tool call of tool that is awaiting kind and returns its id.
func (tb *tab) newestCallID(tool, pending string) string {
	sel := fmt.Sprintf(`[data-parley="tool-call"][data-tool="%s"][data-status="awaiting"][data-pending="%s"]`, tool, pending)
	tb.until(`document.querySelector(` + q(sel) + `) !== null`)
	return eval[string](tb, `Array.from(document.querySelectorAll(`+q(sel)+`)).pop().dataset.toolCallId`)
}

func callSel(id string) string {
	return `[data-parley="tool-call"][data-tool-call-id="` + id + `"]`
}

// callStatusIs is a predicate: the call's card shows status.
func callStatusIs(id, status string) string {
	return `(() => { const c = document.querySelector(` + q(callSel(id)) + `); return c !== null && c.dataset.status === ` + q(status) + `; })()`
}

// mcpToolsFile serves the test MCP server (a real one, the SDK's, over streamable HTTP) and
// returns a tools file naming it "greeter", with its two questioning tools ungated.
func mcpToolsFile(t *testing.T) string {
	t.Helper()
	srv := mcptest.NewServer(false)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	path := filepath.Join(t.TempDir(), "tools.json")
	file := fmt.Sprintf(`{"tools": [], "mcp_servers": [{"name": "greeter", "transport": "http", "url": %q, "allow_private_network": true,
		"tools": {"allow": ["ask", "ask_url"], "approval": {"ask": "auto", "ask_url": "auto"}}}]}`, hs.URL)
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	// One person sends every message of this long session within a minute: a burst above the
	// default budget keeps the limit (tested in the web layer) out of the way.
	h := newHarness(t, withEnv(map[string]string{"PARLEY_TOOLS": mcpToolsFile(t), "PARLEY_MESSAGE_BURST": "40"}))
	defer h.checkConsole()
	ann := h.browserFor("ann")
	ann.shot("conversations")
	ann.checkA11y(t, "conversations list")

	t.Run("chat streams the demo model's answer", func(t *testing.T) {
		ann.newConversation("Streaming")
		// Count renders of the streaming bubble, to see the answer arrive in pieces.
		eval[bool](ann, `(() => { window.__streamFrames = 0; new MutationObserver(ms => { for (const m of ms) {
			for (const n of m.addedNodes) if (n.id === "streaming" && n.querySelector('[data-parley="message-streaming"]')) window.__streamFrames++; } })
			.observe(document.body, {childList: true, subtree: true}); return true; })()`)
		ann.say("hello there")
		ann.until(`document.querySelector('[data-parley="message"][data-role="user"]') !== null`)
		ann.until(`document.querySelector('[data-parley="message"][data-role="assistant"]') !== null`)
		if n := eval[int](ann, `window.__streamFrames`); n < 2 {
			t.Errorf("the answer arrived in %d render(s), want it streamed in several", n)
		}
		ann.until(`document.querySelector('[data-parley="status"]').dataset.status === "idle"`)
		ann.shot("chat-streamed")
	})

	t.Run("hostile text through the model and a tool stays inert", func(t *testing.T) {
		ann.newConversation("XSS")
		ann.say(`echo <img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>[x](javascript:document.title='pwned') ![t](https://evil.example/t.png)`)
		ann.until(`(() => { const c = document.querySelector('[data-parley="tool-call"][data-tool="echo"]'); return c !== null && c.dataset.status === "resolved"; })()`)
		ann.until(`document.querySelector('[data-parley="status"]').dataset.status === "idle"`)
		if title := eval[string](ann, `document.title`); strings.Contains(title, "pwned") {
			t.Fatalf("script ran: title %q", title)
		}
		bad := eval[int](ann, `document.querySelectorAll('img[src="x"], main script, a[href^="javascript:"], img[src^="https://evil"], [onerror]').length`)
		if bad != 0 {
			t.Errorf("%d live elements made from the hostile text", bad)
		}
		if !eval[bool](ann, `document.querySelector('[data-parley="tool-call"][data-tool="echo"]').textContent.includes("<script>")`) {
			t.Errorf("the tool's output is not shown as text")
		}
		ann.shot("hostile-text-inert")
	})

	t.Run("a streaming tool shows its progress while it runs", func(t *testing.T) {
		ann.newConversation("Countdown")
		ann.say("count down from 2")
		sel := `[data-parley="tool-call"][data-tool="count_down"]`
		ann.until(`document.querySelector(` + q(sel+`[data-status="running"] [data-parley="progress"] li`) + `) !== null`)
		ann.shot("progress-running")
		ann.until(`(() => { const c = document.querySelector(` + q(sel) + `); return c !== null && c.dataset.status === "resolved"; })()`)
	})

	t.Run("approve a gated send_email", func(t *testing.T) {
		ann.newConversation("Lunch")
		ann.say("email bob@example.com about lunch")
		id := ann.newestCallID("send_email", "approval")
		ann.until(`document.querySelector(` + q(callSel(id)+` [data-parley="approval"] [data-parley="plan"]`) + `) !== null`)
		// The deadline once, counting down ("in 4 min"), the exact local time on hover.
		deadline := callSel(id) + ` [data-parley="deadline"] time[data-parley="time"]`
		cd := `document.querySelector(` + q(deadline) + `).textContent`
		ann.until(`/^in \d+ (s|min|h)$/.test(` + cd + `)`)
		if title := eval[string](ann, `document.querySelector(`+q(deadline)+`).title`); title == "" || strings.Contains(title, "UTC") {
			t.Errorf("the deadline's exact time is not in local time: %q", title)
		}
		ann.shot("approval-card")
		// The README's picture: the request, the assistant's answer and the card's top (the plan).
		eval[bool](ann, `(document.querySelector('[data-parley="message"][data-role="user"]').scrollIntoView({block: "start"}), window.scrollBy(0, -12), true)`)
		ann.readmeShot()
		eval[bool](ann, `(window.scrollTo(0, document.documentElement.scrollHeight), true)`)
		ann.checkA11y(t, "conversation with an approval card")
		ann.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
		ann.until(callStatusIs(id, "resolved"))
		ann.until(`document.querySelector('[data-parley="status"]').dataset.status === "idle"`)
		ann.shot("approved-done")
	})

	t.Run("deny with a reason", func(t *testing.T) {
		ann.newConversation("Dinner")
		ann.say("email carol@example.com about dinner")
		id := ann.newestCallID("send_email", "approval")
		ann.do(chromedp.Click(chromedp.CSS(callSel(id)+` details[data-parley="deny"] > summary`)),
			chromedp.SendKeys(chromedp.CSS(callSel(id)+` [name="reason"]`), "not this week"),
			chromedp.Click(chromedp.CSS(callSel(id)+` button[name="decision"][value="deny"]`)))
		ann.until(callStatusIs(id, "denied"))
		ann.until(`document.querySelector(` + q(callSel(id)) + `).innerText.includes("not this week")`)
		ann.shot("denied")
	})

	t.Run("answer a question form after a validation error", func(t *testing.T) {
		ann.newConversation("Questions")
		ann.say("ask me a few questions")
		id := ann.newestCallID("ask_user", "elicitation")
		form := callSel(id) + ` form[data-parley="elicitation"]`
		// The deadline, relative ("in 9 min") once the page's script has read it.
		ann.until(`/^in /.test(document.querySelector(` + q(callSel(id)+` [data-parley="deadline"] time`) + `).textContent)`)
		ann.do(chromedp.Click(chromedp.CSS(form + ` button[name="action"][value="accept"]`)))
		ann.until(`document.querySelector(` + q(form+` [data-field="name"] [data-parley="field-error"]`) + `) !== null`)
		ann.shot("question-invalid")
		ann.checkA11y(t, "conversation with a question form and its errors")
		ann.do(chromedp.SendKeys(chromedp.CSS(form+` div[data-field="name"] input`), "Ann"),
			chromedp.SetValue(chromedp.CSS(form+` div[data-field="favourite_colour"] select`), "green"),
			chromedp.Click(chromedp.CSS(form+` button[name="action"][value="accept"]`)))
		ann.until(callStatusIs(id, "resolved"))
		ann.until(`document.querySelector(` + q(callSel(id)) + `).innerText.includes("green")`)
		ann.shot("question-answered")
	})

	t.Run("an MCP server's questions answered from the page", func(t *testing.T) {
		ann.newConversation("MCP")
		idle := `document.querySelector('[data-parley="status"]').dataset.status === "idle"`
		// The server asks mid-call; the card is its form, and the answer reaches the server,
		// whose result shows on the same card.
		ann.say("ask the greeter to greet me")
		id := ann.newestCallID("greeter__ask", "elicitation")
		form := callSel(id) + ` form[data-parley="elicitation"]`
		ann.until(`document.querySelector(` + q(form) + `).innerText.includes("What is your name?")`)
		ann.shot("mcp-question")
		ann.do(chromedp.SendKeys(chromedp.CSS(form+` div[data-field="name"] input`), "Ann"),
			chromedp.Click(chromedp.CSS(form+` button[name="action"][value="accept"]`)))
		ann.until(callStatusIs(id, "resolved"))
		ann.until(`document.querySelector(` + q(callSel(id)) + `).innerText.includes("hello Ann")`)
		ann.until(idle)
		// Declined: the server hears it and decides the result.
		ann.say("ask the greeter to greet me")
		id2 := ann.newestCallID("greeter__ask", "elicitation")
		ann.do(chromedp.Click(chromedp.CSS(callSel(id2) + ` form[data-parley="elicitation"] button[name="action"][value="decline"]`)))
		ann.until(callStatusIs(id2, "resolved"))
		ann.until(`document.querySelector(` + q(callSel(id2)) + `).innerText.includes("no name: decline")`)
		ann.until(idle)
		// A URL-mode question: the link as text with its host, Open in a new tab, then Done.
		ann.say("ask the greeter for a url")
		id3 := ann.newestCallID("greeter__ask_url", "elicitation")
		card := callSel(id3)
		if host := eval[string](ann, `document.querySelector(`+q(card+` [data-parley="url-host"]`)+`).textContent`); host != "auth.example.test" {
			t.Errorf("host shown %q", host)
		}
		open := eval[map[string]string](ann, `(() => { const a = document.querySelector(`+q(card+` a[data-parley="url-open"]`)+`);
			return {href: a.href, target: a.target, rel: a.rel}; })()`)
		if open["href"] != "https://auth.example.test/authorize?x=1" || open["target"] != "_blank" || open["rel"] != "noopener noreferrer" {
			t.Errorf("open link %v", open)
		}
		ann.shot("mcp-url-question")
		ann.do(chromedp.Click(chromedp.CSS(card + ` button[name="action"][value="accept"]`)))
		ann.until(callStatusIs(id3, "resolved"))
		ann.until(`document.querySelector(` + q(card) + `).innerText.includes("url: accept")`)
		ann.until(idle)
	})

	t.Run("geolocation through the built-in hook", func(t *testing.T) {
		ann.newConversation("Where")
		if _, err := chromedp.CallBrowser(ann.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: "geolocation"}, Setting: browser.PermissionSettingGranted, Origin: h.url,
			BrowserContextID: browserContextID(ann)}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ann.ctx, emulation.SetGeolocationOverride, emulation.SetGeolocationOverrideParams{
			Latitude: new(48.8584), Longitude: new(2.2945), Accuracy: new(12.0)}); err != nil {
			t.Fatal(err)
		}
		ann.say("where am I")
		ann.until(`document.querySelector('[data-parley="tool-call"][data-tool="geolocation"] [data-parley="client-allow"]') !== null`)
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="tool-call"][data-tool="geolocation"] [data-parley="client-allow"]`)))
		ann.until(`(() => { const c = document.querySelector('[data-parley="tool-call"][data-tool="geolocation"]'); return c !== null && c.dataset.status === "resolved"; })()`)
		ann.until(`document.querySelector('[data-parley="tool-call"][data-tool="geolocation"]').innerText.includes("48.8584")`)
		ann.shot("geolocation-granted")
	})

	t.Run("geolocation denied is an error, not silence", func(t *testing.T) {
		ann.newConversation("Where not")
		if _, err := chromedp.CallBrowser(ann.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: "geolocation"}, Setting: browser.PermissionSettingDenied, Origin: h.url,
			BrowserContextID: browserContextID(ann)}); err != nil {
			t.Fatal(err)
		}
		ann.say("where am I")
		ann.until(`document.querySelector('[data-parley="tool-call"][data-tool="geolocation"] [data-parley="client-allow"]') !== null`)
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="tool-call"][data-tool="geolocation"] [data-parley="client-allow"]`)))
		ann.until(`(() => { const c = document.querySelector('[data-parley="tool-call"][data-tool="geolocation"]'); return c !== null && c.dataset.status === "errored"; })()`)
		ann.until(`document.querySelector('[data-parley="tool-call"][data-tool="geolocation"] [data-parley="error"]').dataset.kind === "client_error"`)
		ann.shot("geolocation-denied")
	})

	t.Run("the page asks before a client tool runs, and a no reaches the model", func(t *testing.T) {
		ann.newConversation("Ask first")
		eval[bool](ann, `(() => { window.__ran = false; parley.hooks.register("geolocation", async () => { window.__ran = true; return {latitude: 1, longitude: 2, accuracy: 3}; }); return true; })()`)
		ann.say("where am I")
		sel := `[data-parley="tool-call"][data-tool="geolocation"]`
		ann.until(`document.querySelector(` + q(sel+` [data-parley="client-deny"]`) + `) !== null`)
		if eval[bool](ann, `window.__ran`) {
			t.Fatal("the tool ran before the person allowed it")
		}
		ann.shot("client-consent")
		ann.do(chromedp.Click(chromedp.CSS(sel + ` [data-parley="client-deny"]`)))
		ann.until(`(() => { const c = document.querySelector(` + q(sel) + `); return c !== null && c.dataset.status === "errored"; })()`)
		ann.until(`document.querySelector(` + q(sel+` [data-parley="error"]`) + `).innerText.includes("did not allow")`)
		if eval[bool](ann, `window.__ran`) {
			t.Fatal("the tool ran although the person said no")
		}
	})

	t.Run("a registered hook replaces the built-in one, and a refused result becomes an error", func(t *testing.T) {
		ann.newConversation("Custom hook")
		eval[bool](ann, `(() => { parley.hooks.register("geolocation", async () => ({latitude: 999, longitude: 0, accuracy: 1})); return true; })()`)
		ann.say("where am I")
		sel := `[data-parley="tool-call"][data-tool="geolocation"]`
		ann.until(`document.querySelector(` + q(sel+` [data-parley="client-allow"]`) + `) !== null`)
		ann.do(chromedp.Click(chromedp.CSS(sel + ` [data-parley="client-allow"]`)))
		ann.until(`(() => { const c = document.querySelector(` + q(sel) + `); return c !== null && c.dataset.status === "errored"; })()`)
		ann.until(`document.querySelector(` + q(sel+` [data-parley="error"]`) + `).innerText.includes("refused")`)
		ann.shot("hook-result-refused")
	})

	t.Run("a second tab deciding the same call is told it was already decided", func(t *testing.T) {
		ann.newConversation("Two tabs")
		ann.say("email dave@example.com about tea")
		id := ann.newestCallID("send_email", "approval")
		page := eval[string](ann, `location.href`)
		// The second tab runs without JavaScript: its form is a plain POST that cannot have been
		// updated by a socket, as a slow or stale tab would be.
		second := ann.another()
		if _, err := chromedp.Call(second.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		second.do(chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(callSel(id)+` button[name="decision"][value="approve"]`)))
		ann.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
		ann.until(callStatusIs(id, "resolved"))
		second.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
		second.until(`location.search.includes("notice=stale")`)
		second.until(`document.querySelector(` + q(callSel(id)+` [data-parley="notice"]`) + `).innerText.includes("already decided")`)
		if st := eval[string](second, `document.querySelector(`+q(callSel(id))+`).dataset.status`); st != "resolved" && st != "running" {
			t.Errorf("second tab shows status %q, want the final state", st)
		}
		second.until(callStatusIs(id, "resolved"))
		second.shot("second-tab-stale")
		ann.until(callStatusIs(id, "resolved"))
	})

	t.Run("reload while awaiting keeps the card", func(t *testing.T) {
		ann.newConversation("Reload")
		ann.say("email erin@example.com about coffee")
		id := ann.newestCallID("send_email", "approval")
		ann.do(chromedp.Reload())
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		ann.until(`document.querySelector(` + q(callSel(id)+`[data-status="awaiting"] [data-parley="approval"] button[name="decision"][value="approve"]`) + `) !== null`)
		ann.shot("reloaded-awaiting")
		ann.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
		ann.until(callStatusIs(id, "resolved"))
	})

	t.Run("a page that lost its socket reconnects and catches up", func(t *testing.T) {
		ann.newConversation("Reconnect")
		ann.say("email gina@example.com about the move")
		id := ann.newestCallID("send_email", "approval")
		page := eval[string](ann, `location.href`)
		// Drop the socket and hold the reconnect back for a few seconds.
		eval[bool](ann, `(() => { parley.live.backoff = 4000; parley.live.ws.close(); return true; })()`)
		ann.until(`document.documentElement.dataset.parleySocket === "closed"`)
		other := ann.another()
		if _, err := chromedp.Call(other.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		other.do(chromedp.Navigate(page), chromedp.Click(chromedp.CSS(callSel(id)+` button[name="decision"][value="approve"]`)))
		// Without JavaScript the redirected page shows the call as the decision left it.
		other.until(`(() => { const c = document.querySelector(` + q(callSel(id)) + `); return c !== null && c.dataset.status !== "awaiting"; })()`)
		if st := eval[string](ann, `document.querySelector(`+q(callSel(id))+`).dataset.status`); st != "awaiting" {
			t.Fatalf("the disconnected page changed without its socket: %q", st)
		}
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		ann.until(callStatusIs(id, "resolved"))
		ann.shot("reconnected-resynced")
	})

	t.Run("without JavaScript a running turn says to reload, and Stop works", func(t *testing.T) {
		nojs := ann.another()
		if _, err := chromedp.Call(nojs.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		nojs.do(chromedp.Navigate(h.url+"/conversations"),
			chromedp.SendKeys(chromedp.CSS(`form[data-parley="new-conversation"] input[name="title"]`), "No script"),
			chromedp.Click(chromedp.CSS(`form[data-parley="new-conversation"] button[type="submit"]`)))
		nojs.until(`location.pathname.startsWith("/conversations/") && document.querySelector('form[data-parley="composer"]') !== null`)
		nojs.do(chromedp.SendKeys(chromedp.CSS(`form[data-parley="composer"] textarea[name="text"]`), "count down from 10"),
			chromedp.Click(chromedp.CSS(`form[data-parley="composer"] button[type="submit"]`)))
		// The plain POST comes back to the page while the countdown runs: it says to reload.
		nojs.until(`(() => { const n = document.querySelector('[data-parley="noscript-reload"]'); return n !== null && n.getClientRects().length > 0; })()`)
		nojs.shot("no-javascript-running")
		nojs.do(chromedp.Click(chromedp.CSS(stopButton)))
		nojs.until(`document.querySelector('[data-parley="status"]').dataset.status === "idle" && document.querySelector('[data-parley="noscript-reload"]') === null`)
	})

	t.Run("the reviewer inbox updates live", func(t *testing.T) {
		rita := h.browserFor("rita")
		rita.do(chromedp.Navigate(h.url + "/inbox"))
		rita.until(`document.documentElement.dataset.parleySocket === "open"`)
		if n := eval[int](rita, `document.querySelectorAll('[data-parley="inbox"] [data-parley="approval"]').length`); n != 0 {
			t.Fatalf("inbox starts with %d approvals", n)
		}
		chat := rita.another()
		chat.newConversation("Reviewer's own")
		chat.say("email frank@example.com about the review")
		id := chat.newestCallID("send_email", "approval")
		rita.until(`document.querySelector('[data-parley="inbox"] [data-parley="approval"][data-tool-call-id="` + id + `"]') !== null`)
		rita.until(`document.querySelector('[data-parley="inbox"]').innerText.includes("Reviewer's own")`)
		rita.shot("inbox-live")
		rita.checkA11y(t, "inbox with an approval")
		rita.do(chromedp.Click(chromedp.CSS(`[data-parley="inbox"] [data-parley="approval"][data-tool-call-id="` + id + `"] button[name="decision"][value="approve"]`)))
		rita.until(`document.querySelectorAll('[data-parley="inbox"] [data-parley="approval"]').length === 0`)
		chat.until(callStatusIs(id, "resolved"))
		rita.shot("inbox-decided")
	})

	t.Run("the sign-in page", func(t *testing.T) {
		anon := h.signedOut()
		anon.do(chromedp.Navigate(h.url + "/login"))
		anon.until(`document.querySelector('input[name="password"]') !== null`)
		anon.checkA11y(t, "sign-in")
		anon.shot("sign-in")
	})
}

// browserContextID is the browser context of a tab (each signed-in user has their own).
func browserContextID(tb *tab) cdp.BrowserContextID {
	if c := chromedp.FromContext(tb.ctx); c != nil {
		return c.BrowserContextID
	}
	return ""
}
