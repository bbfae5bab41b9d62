package browsertest

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// reviewedEcho is a tools file whose echo tool waits for a reviewer and posts to url: the demo
// model calls echo for "echo …", so members' calls land in every reviewer's inbox.
func reviewedEcho(t *testing.T, url string) string {
	t.Helper()
	file := map[string]any{"tools": []any{map[string]any{
		"name": "echo", "type": "http", "description": "Echo a text back (a reviewer approves).",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string", "maxLength": 200}},
			"required": []string{"text"}, "additionalProperties": false},
		"request":       map[string]any{"method": "POST", "url": url, "json": map[string]any{"text": "{{ text }}"}},
		"allowed_hosts": []string{"127.0.0.1"},
		"approval":      "requires_approval", "approvers": "reviewer",
	}}}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBrowserGovernance: approval governance in the browser, on one app and one browser:
// remembered approvals (rememberApproval), the live pending count (pendingCount), and the
// reviewer inbox 2.0. Members
// ask for reviewer-gated echo calls; rita filters her inbox by requester (the filter is in the
// URL: it survives a reload, and the live list keeps it while the count covers everything);
// the entries share the demo model's call id, yet every element id is unique and each card's
// label focuses its own field;
// rita claims a call and sam's open inbox shows "rita is looking at this" live; sam approves
// two calls at once with one reason and reads the outcome of each; the calls run. The opt-in
// for browser notifications asks for permission, and a new approval while the tab is hidden
// notifies with the tool and the requester only.
func TestBrowserGovernance(t *testing.T) {
	t.Parallel()
	echoed := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		echoed <- string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	h := newHarness(t, withEnv(map[string]string{"PARLEY_TOOLS": reviewedEcho(t, srv.URL+"/echo"), "PARLEY_TEST_TOOLS": "false"}),
		withUser("sam", "reviewer"), withUser("bob", "member"))
	defer h.checkConsole()

	// The demo model's call ids repeat across conversations (demo_1_0): an inbox entry is
	// known by its conversation, which holds one call here.
	ask := func(tb *tab, title, text string) string {
		tb.newConversation(title)
		tb.say(text)
		tb.newestCallID("echo", "approval")
		return eval[string](tb, `location.pathname.split("/")[2]`)
	}
	ann, rita := h.browserFor("ann"), h.browserFor("rita")
	t.Run("remember an approval", func(t *testing.T) { rememberApproval(t, h, ann) })
	t.Run("the pending count", func(t *testing.T) { pendingCount(t, h, rita) })

	bob := h.browserFor("bob")
	a1 := ask(ann, "Ann's first", "echo one")
	b1 := ask(bob, "Bob's", "echo two")

	entry := func(conv string) string { return `[data-parley="inbox-entry"][data-conversation-id="` + conv + `"]` }
	listed := func(convs ...string) string {
		return `Array.from(document.querySelectorAll('[data-parley="inbox-entry"]')).map(e => e.dataset.conversationId).join() === ` + q(strings.Join(convs, ","))
	}
	var a2 string
	t.Run("filters", func(t *testing.T) {
		rita.do(chromedp.Navigate(h.url + "/inbox"))
		rita.until(`document.documentElement.dataset.parleySocket === "open"`)
		rita.until(listed(b1, a1))
		rita.do(chromedp.SendKeys(chromedp.CSS(`[data-parley="filter-requester"]`), "bob"),
			chromedp.Click(chromedp.CSS(`[data-parley="filter-apply"]`)))
		rita.until(`location.search.includes("requester=bob") && document.documentElement.dataset.parleySocket === "open"`)
		rita.until(listed(b1))
		rita.do(chromedp.Reload())
		rita.until(`document.documentElement.dataset.parleySocket === "open"`)
		rita.until(listed(b1))
		// A new approval of ann's: counted (title and data-total), not listed.
		a2 = ask(ann, "Ann's second", "echo three")
		rita.until(`document.querySelector('[data-parley="inbox"]').dataset.total === "3" && document.title.startsWith("(3) ")`)
		rita.until(listed(b1))
		rita.shot("inbox-filtered")
		rita.do(chromedp.Click(chromedp.CSS(`[data-parley="filter-clear"]`)))
		rita.until(`location.search === "" && document.documentElement.dataset.parleySocket === "open"`)
		rita.until(listed(a2, b1, a1))
	})
	t.Run("ids per conversation and call", func(t *testing.T) {
		// The entries share their call id, and still no element id repeats: a card's label
		// focuses that card's field, not the first one with the call's id.
		if n := eval[int](rita, `new Set(Array.from(document.querySelectorAll('[data-parley="inbox-entry"]')).map(e => e.dataset.toolCallId)).size`); n != 1 {
			t.Fatalf("the entries hold %d call ids, want the demo model's one", n)
		}
		if !eval[bool](rita, `(() => { const ids = Array.from(document.querySelectorAll("[id]")).map(e => e.id); return new Set(ids).size === ids.length; })()`) {
			t.Fatalf("the inbox repeats an element id")
		}
		rita.do(chromedp.Click(chromedp.CSS(entry(a1)+` details[data-parley="deny"] > summary`)),
			chromedp.Click(chromedp.CSS(entry(a1)+` label[for^="reason-"]`)))
		rita.until(`(() => { const e = document.activeElement && document.activeElement.closest('[data-parley="inbox-entry"]'); return e !== null && e.dataset.conversationId === ` + q(a1) + ` && document.activeElement.name === "reason"; })()`)
	})

	sam := h.browserFor("sam")
	sam.do(chromedp.Navigate(h.url + "/inbox"))
	sam.until(`document.documentElement.dataset.parleySocket === "open"`)
	t.Run("claim", func(t *testing.T) {
		rita.do(chromedp.Click(chromedp.CSS(entry(a1) + ` [data-parley="claim"]`)))
		rita.until(`(() => { const c = document.querySelector(` + q(entry(a1)+` [data-parley="claimed-by"]`) + `); return c !== null && c.innerText.includes("You are looking at this"); })()`)
		sam.until(`(() => { const c = document.querySelector(` + q(entry(a1)+` [data-parley="claimed-by"]`) + `); return c !== null && c.innerText.includes("rita is looking at this"); })()`)
		sam.shot("inbox-claimed")
	})

	t.Run("bulk approve", func(t *testing.T) {
		rows := eval[[]string](sam, `Array.from(document.querySelectorAll('[data-parley="inbox-entry"][data-requester="ann"]')).map(e => e.dataset.conversationId)`)
		if len(rows) != 2 {
			t.Fatalf("sam's inbox lists ann's calls %v, want 2", rows)
		}
		for _, id := range rows {
			sam.do(chromedp.Click(chromedp.CSS(entry(id) + ` input[data-parley="bulk-item"]`)))
		}
		sam.do(chromedp.SendKeys(chromedp.CSS(`[data-parley="bulk-reason"]`), "both fine"),
			chromedp.Click(chromedp.CSS(`[data-parley="bulk-approve"]`)))
		sam.until(`(() => { const r = document.querySelector('[data-parley="bulk-results"]'); return r !== null && r.innerText.includes("Approved 2 of 2 selected"); })()`)
		// Post/redirect/get: the outcome is the inbox's, in counts, and a reload decides nothing.
		if got := eval[string](sam, `location.pathname + location.search`); got != "/inbox?bulk=approve&bulk_ok=2" {
			t.Fatalf("after the bulk decision the page is %q", got)
		}
		if n := eval[string](sam, `document.querySelector('[data-parley="bulk-results"]').dataset.ok`); n != "2" {
			t.Fatalf("%s items ok, want 2", n)
		}
		sam.shot("inbox-bulk")
		for range 2 {
			if got := <-echoed; !strings.Contains(got, "one") && !strings.Contains(got, "three") {
				t.Fatalf("the receiver got %s", got)
			}
		}
		rita.until(listed(b1))
		ann.until(statusIs("idle"))
	})

	t.Run("opt-in browser notifications", func(t *testing.T) {
		// Headless Chromium shows no notifications: the page's Notification is replaced by a
		// recorder that grants permission, and the tab made hidden; the opt-in is the page's own
		// button, which reads Notification when clicked.
		sam.do(chromedp.Navigate(h.url + "/inbox"))
		sam.until(`document.documentElement.dataset.parleySocket === "open"`)
		eval[bool](sam, `(() => {
			window.__notes = [];
			const N = function (title, opts) { window.__notes.push({ title: title, body: opts.body }); };
			N.permission = "granted";
			N.requestPermission = function () { return Promise.resolve("granted"); };
			window.Notification = N;
			Object.defineProperty(document, "hidden", { configurable: true, get: function () { return true; } });
			return true;
		})()`)
		btn := `[data-parley="notify-optin"]`
		sam.until(`document.querySelector(` + q(btn) + `).hidden === false`)
		if eval[string](sam, `document.querySelector(`+q(btn)+`).dataset.state`) == "on" {
			sam.do(chromedp.Click(chromedp.CSS(btn))) // off first: the test turns it on itself
		}
		sam.do(chromedp.Click(chromedp.CSS(btn)))
		sam.until(`document.querySelector(` + q(btn) + `).dataset.state === "on" && localStorage.getItem("parley.notify") === "1"`)
		ask(bob, "Bob's second", "echo four")
		sam.until(`window.__notes.length === 1`)
		note := eval[map[string]string](sam, `window.__notes[0]`)
		if note["title"] != "Approval requested" || note["body"] != "echo — requested by bob" {
			t.Fatalf("the notification says %v", note)
		}
	})
}

// TestBrowserInboxKeepsPlace: on a phone (390×844) the inbox opens at its top, and an approval
// that arrives while the reviewer reads further down waits behind "1 new" instead of moving the
// entry they read; the button shows it. axe finds nothing serious on it, light or dark.
func TestBrowserInboxKeepsPlace(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	h := newHarness(t, withEnv(map[string]string{"PARLEY_TOOLS": reviewedEcho(t, srv.URL+"/echo"), "PARLEY_TEST_TOOLS": "false"}))
	defer h.checkConsole()
	ann, rita := h.browserFor("ann"), h.browserFor("rita")
	ask := func(title, text string) string {
		ann.newConversation(title)
		ann.say(text)
		ann.newestCallID("echo", "approval")
		return eval[string](ann, `location.pathname.split("/")[2]`)
	}
	for i, word := range []string{"one", "two", "three"} {
		ask("Ask "+strconv.Itoa(i+1), "echo "+word)
	}
	phone(t, rita)
	rita.do(chromedp.Navigate(h.url + "/inbox"))
	rita.until(`document.documentElement.dataset.parleySocket === "open" && document.querySelectorAll('[data-parley="inbox-entry"]').length === 3`)
	if y := eval[float64](rita, `window.scrollY`); y != 0 {
		t.Errorf("the inbox opened scrolled to %.0f, want its top", y)
	}
	for _, scheme := range []string{"light", "dark"} {
		colorScheme(t, rita, scheme)
		rita.checkA11y(t, "inbox at 390 px, "+scheme)
		rita.shot("inbox-390-" + scheme)
	}
	colorScheme(t, rita, "")

	// Read the second entry, at the top of the screen; a new approval arrives.
	second := `document.querySelectorAll('[data-parley="inbox-entry"]')[1]`
	reading := eval[string](rita, `(() => { const e = `+second+`; e.scrollIntoView({block: "start"}); return e.dataset.conversationId; })()`)
	rita.until(`window.scrollY > 0`)
	top := func() float64 {
		return eval[float64](rita, `document.querySelector('[data-parley="inbox-entry"][data-conversation-id=`+q(reading)+`]').getBoundingClientRect().top`)
	}
	before := top()
	fresh := ask("Ask 4", "echo four")
	rita.until(`document.querySelector('[data-parley="inbox"]').dataset.total === "4"`)
	rita.until(`(() => { const b = document.querySelector('[data-parley="inbox-new"]'); return !b.hidden && b.textContent.startsWith("1 new"); })()`)
	if after := top(); math.Abs(after-before) > 1 {
		t.Errorf("the entry being read moved from %.0f to %.0f px when an approval arrived", before, after)
	}
	newEntry := `document.querySelector('[data-parley="inbox-entry"][data-conversation-id=` + q(fresh) + `]')`
	if eval[bool](rita, newEntry+`.offsetParent !== null`) {
		t.Errorf("the new approval was shown above the reader")
	}
	if !eval[bool](rita, `(() => { const r = document.querySelector('[data-parley="inbox-new"]').getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()`) {
		t.Errorf("the \"1 new\" button is off screen")
	}
	rita.shot("inbox-1-new")
	rita.do(chromedp.Click(chromedp.CSS(`[data-parley="inbox-new"]`)))
	rita.until(`document.querySelector('[data-parley="inbox-new"]').hidden`)
	rita.until(`(() => { const e = ` + newEntry + `; if (e === null || e.offsetParent === null) return false; const r = e.getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight; })()`)
	rita.shot("inbox-new-shown")
}
