package browsertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
		rita.do(chromedp.Click(chromedp.CSS(entry(a1) + ` label[for^="reason-"]`)))
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
