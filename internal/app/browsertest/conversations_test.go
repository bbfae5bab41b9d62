package browsertest

import (
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestBrowserConversations: a conversation is named after its first message, renamed and
// deleted from its page's menu (a disclosure: no script needed), and found by title and by
// message text on the conversations page; at 390 px the open menu does not make the page scroll sideways.
func TestBrowserConversations(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")

	ann.newConversation("")
	ann.say("what time is it\nplease")
	// The status is idle before the message is taken too: wait for the answer, which the turn
	// writes after the title (a reload sooner can render the page before the title is stored).
	ann.until(`document.querySelector('[data-parley="message"][data-role="assistant"]') !== null`)
	ann.until(statusIs("idle"))
	id := eval[string](ann, `document.querySelector('[data-parley="conversation"]').dataset.conversationId`)
	ann.do(chromedp.Reload())
	ann.until(`document.querySelector('[data-parley="conversation-title"]').textContent === "what time is it"`)
	// The socket's resync on connect re-renders the page: open the menu after it.
	ann.until(`document.documentElement.dataset.parleySocket === "open"`)
	if got := eval[string](ann, `document.title`); got != "what time is it · Parley" {
		t.Errorf("document title %q", got)
	}

	// Rename from the menu, by keyboard.
	ann.do(chromedp.Click(chromedp.CSS(`[data-parley="conversation-menu"] > summary`)))
	ann.until(`document.querySelector('[data-parley="conversation-menu"]').open`)
	eval[bool](ann, `(document.querySelector("#rename-title").value = "", true)`)
	ann.do(chromedp.SendKeys(chromedp.CSS(`#rename-title`), "Clock questions\r"))
	ann.until(`location.search === "?notice=renamed" && document.querySelector('[data-parley="conversation-title"]').textContent === "Clock questions"`)

	// Search by title: a match, then none.
	ann.newConversation("Lunch plans") // a second conversation, which must not match
	other := eval[string](ann, `document.querySelector('[data-parley="conversation"]').dataset.conversationId`)
	ann.do(chromedp.Navigate(h.url+"/conversations"),
		chromedp.SendKeys(chromedp.CSS(`form[data-parley="search"] input[name="q"]`), "CLOCK\r"))
	ann.until(`location.search === "?q=CLOCK"`)
	ann.until(`document.querySelectorAll('[data-parley="conversation-link"]').length === 1 && document.querySelector('[data-parley="conversation-link"]').dataset.conversationId === ` + q(id))
	ann.shot("conversations-search")
	eval[bool](ann, `(document.querySelector('form[data-parley="search"] input[name="q"]').value = "", true)`)
	ann.do(chromedp.SendKeys(chromedp.CSS(`form[data-parley="search"] input[name="q"]`), "zebra\r"))
	ann.until(`document.querySelector('[data-parley="search-empty"]') !== null`)

	// Search by message text: the assistant's "Let me check the clock.", shown as a marked
	// excerpt that leads to the message.
	eval[bool](ann, `(document.querySelector('form[data-parley="search"] input[name="q"]').value = "", true)`)
	ann.do(chromedp.SendKeys(chromedp.CSS(`form[data-parley="search"] input[name="q"]`), "CHEC\r"))
	ann.until(`location.search === "?q=CHEC"`)
	ann.until(`document.querySelectorAll('[data-parley="conversation-link"]').length === 1 && document.querySelector('[data-parley="search-snippet"] mark') !== null`)
	if got := eval[string](ann, `document.querySelector('[data-parley="search-snippet"] mark').textContent`); got != "check" {
		t.Errorf("the marked word is %q, want \"check\"", got)
	}
	ann.checkA11y(t, "conversations search results")
	ann.shot("conversations-search-messages")
	ann.do(chromedp.Click(chromedp.CSS(`[data-parley="search-snippet"]`)))
	ann.until(`location.pathname === "/conversations/` + id + `" && location.hash !== "" && document.querySelector(location.hash + ' [data-parley="message"][data-role="assistant"]') !== null`)

	// At 390 px, the open menu stays on screen.
	if _, err := chromedp.Call(ann.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 390, Height: 844, DeviceScaleFactor: 2, Mobile: true}); err != nil {
		t.Fatal(err)
	}
	ann.do(chromedp.Navigate(h.url + "/conversations/" + id))
	ann.do(chromedp.Click(chromedp.CSS(`[data-parley="conversation-menu"] > summary`)),
		chromedp.Click(chromedp.CSS(`[data-parley="confirm-delete"] > summary`)))
	ann.until(`document.querySelector('[data-parley="confirm-delete"]').open`)
	if w := eval[float64](ann, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("with the menu open the page is %v px wide at 390 px", w)
	}
	if !eval[bool](ann, `(() => { const r = document.querySelector('.conv-menu-body').getBoundingClientRect(); return r.left >= 0 && r.right <= 390; })()`) {
		t.Errorf("the open menu leaves the screen at 390 px")
	}
	ann.shot("conversation-menu-390")
	if _, err := chromedp.Call(ann.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}

	// Delete, confirmed: back on the list, which says so and no longer has it.
	ann.do(chromedp.Click(chromedp.CSS(`form[data-parley="delete"] button[type="submit"]`)))
	ann.until(`location.pathname === "/conversations" && location.search === "?notice=deleted"`)
	ann.until(`document.querySelector('[data-conversation-id=` + q(id) + `]') === null && document.querySelector('[data-conversation-id=` + q(other) + `]') !== null`)
	ann.do(chromedp.Navigate(h.url + "/conversations/" + id))
	ann.until(`document.querySelector('[data-parley="error"][data-status="404"]') !== null`)
}
