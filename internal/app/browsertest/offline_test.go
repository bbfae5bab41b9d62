package browsertest

import (
	"strconv"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

const composerBox = `form[data-parley="composer"] textarea[name="text"]`

// offline cuts the tab off the network (every request and socket fails as with no connection),
// or gives it back.
func (tb *tab) offline(off bool) {
	tb.h.t.Helper()
	if _, err := chromedp.Call(tb.ctx, network.Enable, network.EnableParams{}); err != nil {
		tb.h.t.Fatalf("network.enable: %v", err)
	}
	var rules []*network.Conditions
	if off {
		rules = []*network.Conditions{{Offline: true, DownloadThroughput: -1, UploadThroughput: -1}}
	}
	if _, err := chromedp.Call(tb.ctx, network.EmulateNetworkConditionsByRule,
		network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: rules}); err != nil {
		tb.h.t.Fatalf("emulate offline=%v: %v", off, err)
	}
}

// pressEnter types text into the composer and presses Enter as a keyboard does: one keyDown
// carrying its text, which the page's handler may cancel (chromedp's SendKeys sends the key's
// text as a separate event, which no handler can cancel, so the line break would land anyway).
func (tb *tab) pressEnter(text string) {
	tb.h.t.Helper()
	if text != "" {
		tb.do(chromedp.SendKeys(chromedp.CSS(composerBox), text))
	}
	tb.do(chromedp.Focus(chromedp.CSS(composerBox)))
	for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
		p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
		if typ == input.DispatchKeyEventTypeKeyDown {
			p.Text, p.UnmodifiedText = "\r", "\r"
		}
		if _, err := chromedp.Call(tb.ctx, input.DispatchKeyEvent, p); err != nil {
			tb.h.t.Fatalf("press Enter: %v", err)
		}
	}
}

// TestBrowserOfflineSend: a message sent while the app cannot be reached stays in the page
// (same address, the text still in the composer, an alert saying it was not sent, with Retry),
// and Retry once back online sends it once; the composer's draft survives a reload, belongs to
// its conversation, is forgotten once sent; the composer grows with its text, up to a bound.
func TestBrowserOfflineSend(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ann := h.browserFor("ann")

	t.Run("a send while offline stays in the page, and Retry sends it once", func(t *testing.T) {
		ann.newConversation("Offline")
		page := eval[string](ann, `location.href`)
		ann.offline(true)
		const text = "sent while the network is down"
		ann.pressEnter(text)
		ann.until(`(() => { const n = document.querySelector('[data-parley="send-failed"]'); return n !== null && n.innerText.includes("Not sent"); })()`)
		ann.shot("send-failed-offline")
		if got := eval[string](ann, `location.href`); got != page {
			t.Errorf("the page left for %q", got)
		}
		if got := eval[string](ann, `document.querySelector(`+q(composerBox)+`).value`); got != text {
			t.Errorf("the composer holds %q after the failed send", got)
		}
		if role := eval[string](ann, `document.querySelector('[data-parley="send-failed"]').getAttribute("role")`); role != "alert" {
			t.Errorf("the not-sent notice has role %q", role)
		}
		if n := eval[int](ann, `document.querySelectorAll('[data-parley="message"][data-role="user"]').length`); n != 0 {
			t.Errorf("%d user messages in the timeline before anything was sent", n)
		}

		ann.offline(false)
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="send-failed"] [data-parley="retry-send"]`)))
		ann.until(`document.querySelector('[data-parley="message"][data-role="assistant"]') !== null`)
		ann.until(statusIs("idle"))
		sent := `Array.from(document.querySelectorAll('[data-parley="message"][data-role="user"]')).filter(m => m.innerText.includes(` + q(text) + `)).length`
		if n := eval[int](ann, sent); n != 1 {
			t.Errorf("the message shows %d times after Retry, want once", n)
		}
		if eval[bool](ann, `document.querySelector('[data-parley="send-failed"]') !== null`) {
			t.Error("the not-sent notice stays after the message was sent")
		}
		if got := eval[string](ann, `document.querySelector(`+q(composerBox)+`).value`); got != "" {
			t.Errorf("the composer still holds %q after the send", got)
		}
		ann.do(chromedp.Reload())
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		if n := eval[int](ann, sent); n != 1 {
			t.Errorf("after a reload the message shows %d times, want once", n)
		}
		if got := eval[string](ann, `document.querySelector(`+q(composerBox)+`).value`); got != "" {
			t.Errorf("a sent message came back as a draft: %q", got)
		}
	})

	t.Run("a send the server fails (5xx) stays in the page with the server's words", func(t *testing.T) {
		tb := ann.another()
		tb.newConversation("Server failing")
		page := eval[string](tb, `location.href`)
		// Every post of a message is answered 503 by the browser itself until Fetch.disable.
		if err := chromedp.Listen(tb.ctx, func(ev any) {
			e, ok := ev.(*fetch.EventRequestPaused)
			if !ok {
				return
			}
			go func() {
				_, _ = chromedp.Call(tb.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID, ResponseCode: 503,
					ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}},
					Body:            []byte(`{"error":{"kind":"unavailable","message":"the database is not answering"}}`)})
			}()
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(tb.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/messages"}}}); err != nil {
			t.Fatal(err)
		}
		const text = "sent while the database is away"
		tb.pressEnter(text)
		tb.until(`(() => { const n = document.querySelector('[data-parley="send-failed"]'); return n !== null && n.innerText.includes("the database is not answering"); })()`)
		if got := eval[string](tb, `location.href`); got != page {
			t.Errorf("the page left for %q", got)
		}
		if got := eval[string](tb, `document.querySelector(`+q(composerBox)+`).value`); got != text {
			t.Errorf("the composer holds %q after the failed send", got)
		}
		if _, err := chromedp.Call(tb.ctx, fetch.Disable, cdp.Empty{}); err != nil {
			t.Fatal(err)
		}
		tb.do(chromedp.Click(chromedp.CSS(`[data-parley="send-failed"] [data-parley="retry-send"]`)))
		tb.until(`Array.from(document.querySelectorAll('[data-parley="message"][data-role="user"]')).some(m => m.innerText.includes(` + q(text) + `))`)
		tb.until(`document.querySelector('[data-parley="send-failed"]') === null`)
		tb.until(statusIs("idle"))
	})

	t.Run("a draft survives a reload, in its own conversation only", func(t *testing.T) {
		ann.newConversation("Draft")
		page := eval[string](ann, `location.href`)
		const draft = "half a thought"
		ann.do(chromedp.SendKeys(chromedp.CSS(composerBox), draft))
		ann.do(chromedp.Reload())
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		ann.until(`document.querySelector(` + q(composerBox) + `).value === ` + q(draft))

		ann.newConversation("Another")
		if got := eval[string](ann, `document.querySelector(`+q(composerBox)+`).value`); got != "" {
			t.Errorf("another conversation's composer starts with %q", got)
		}
		ann.do(chromedp.Navigate(page))
		ann.until(`document.querySelector(` + q(composerBox) + `).value === ` + q(draft))
		ann.pressEnter("")
		ann.until(`document.querySelector('[data-parley="message"][data-role="user"]') !== null`)
		ann.until(`document.querySelector(` + q(composerBox) + `).value === ""`)
		ann.do(chromedp.Reload())
		ann.until(`document.documentElement.dataset.parleySocket === "open"`)
		if got := eval[string](ann, `document.querySelector(`+q(composerBox)+`).value`); got != "" {
			t.Errorf("the sent draft came back after a reload: %q", got)
		}
	})

	t.Run("the composer grows with its text, up to a bound", func(t *testing.T) {
		ann.newConversation("Grow")
		height := `document.querySelector(` + q(composerBox) + `).getBoundingClientRect().height`
		set := func(lines int) float64 {
			return eval[float64](ann, `(() => { const b = document.querySelector(`+q(composerBox)+`);
				b.value = Array.from({length: `+strconv.Itoa(lines)+`}, (_, i) => "line " + i).join("\n");
				b.dispatchEvent(new Event("input", {bubbles: true}));
				return `+height+`; })()`)
		}
		two := eval[float64](ann, height)
		six := set(6)
		if six <= two+20 {
			t.Errorf("six lines: the composer is %.0f px high, two lines %.0f", six, two)
		}
		many := set(200)
		limit := eval[float64](ann, `window.innerHeight / 3 + 2`)
		if many > limit || many < six {
			t.Errorf("200 lines: the composer is %.0f px high, want between %.0f and %.0f", many, six, limit)
		}
		ann.shot("composer-grown")
		set(0)
	})
	h.checkConsole()
}
