package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// TestBrowserChatLayout: the page behaves like a chat — the composer has the focus in a new
// conversation and stays in view, short messages do not wrap, the page follows new content
// until the person scrolls up (then "Jump to latest"), a keyboard user keeps the focus after a
// decision, a skip link leads to the content, and at 390 px nothing scrolls sideways and every
// button is at least 44 px.
func TestBrowserChatLayout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")

	t.Run("focus, bubbles and the pinned composer", func(t *testing.T) {
		ann.newConversation("Layout")
		if !eval[bool](ann, `document.activeElement === document.querySelector('form[data-parley="composer"] textarea')`) {
			t.Errorf("the new conversation's composer does not have the focus")
		}
		for _, text := range []string{"hi", "retry"} {
			ann.say(text)
			ann.until(`Array.from(document.querySelectorAll('[data-parley="message"][data-role="user"] .message-body')).some(b => b.textContent === ` + q(text) + `)`)
			ann.until(statusIs("idle"))
		}
		// One line each: the body is as tall as one line of its text.
		lines := eval[[]float64](ann, `Array.from(document.querySelectorAll('[data-parley="message"][data-role="user"] .message-body')).map(b => b.getBoundingClientRect().height / parseFloat(getComputedStyle(b).lineHeight))`)
		for i, n := range lines {
			if n > 1.5 {
				t.Errorf("short message %d wraps onto %.1f lines", i, n)
			}
		}
		// The composer is on screen however long the conversation.
		if !eval[bool](ann, `(() => { const r = document.querySelector('form[data-parley="composer"]').getBoundingClientRect(); return r.bottom <= window.innerHeight + 1 && r.top >= 0; })()`) {
			t.Errorf("the composer is not in view")
		}
		// Message times are the browser's local times (the server's UTC text is the fallback).
		if !eval[bool](ann, `(() => { const t = document.querySelector('[data-parley="message"] time[data-parley="time"]'); return t !== null && !t.textContent.includes("UTC") && t.title !== ""; })()`) {
			t.Errorf("message times are not shown in local time")
		}
		ann.shot("layout-bubbles")
	})

	t.Run("keyboard-only approval keeps the focus on the card", func(t *testing.T) {
		ann.newConversation("Keyboard")
		ann.say("email bob@example.com about lunch")
		id := ann.newestCallID("send_email", "approval")
		ann.do(chromedp.Focus(chromedp.CSS(callSel(id)+` button[name="decision"][value="approve"]`)),
			chromedp.KeyEvent("\r"))
		ann.until(callStatusIs(id, "resolved"))
		ann.until(`(() => { const a = document.activeElement; return a !== null && a !== document.body && a.closest(` + q(`#call-`+id) + `) !== null; })()`)
	})

	t.Run("Enter sends, Shift+Enter breaks a line; edited arguments; answers and cards are announced", func(t *testing.T) {
		ann.newConversation("Keys")
		eval[bool](ann, `(() => { window.__announced = []; const r = document.getElementById("announce");
			new MutationObserver(() => window.__announced.push(r.textContent)).observe(r, {childList: true, characterData: true, subtree: true}); return true; })()`)
		ta := `form[data-parley="composer"] textarea[name="text"]`
		ann.do(chromedp.SendKeys(chromedp.CSS(ta), "email bob@example.com"),
			chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierShift)),
			chromedp.SendKeys(chromedp.CSS(ta), "about lunch"))
		if v := eval[string](ann, `document.querySelector(`+q(ta)+`).value`); v != "email bob@example.com\nabout lunch" {
			t.Errorf("after Shift+Enter the composer holds %q, want two lines", v)
		}
		// A real Enter: one keyDown carrying its text, as a keyboard sends it (chromedp.KeyEvent
		// sends the character as an event of its own, which no page can cancel).
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
			if typ == input.DispatchKeyEventTypeKeyDown {
				p.Text, p.UnmodifiedText = "\r", "\r"
			}
			if _, err := chromedp.Call(ann.ctx, input.DispatchKeyEvent, p); err != nil {
				t.Fatal(err)
			}
		}
		ann.until(`Array.from(document.querySelectorAll('[data-parley="message"][data-role="user"] .message-body')).some(b => b.textContent === "email bob@example.com\nabout lunch")`)
		// The composer empties when the post answers, which may come after the socket showed
		// the message: wait for it rather than read it once.
		ann.until(`document.querySelector(` + q(ta) + `).value === ""`)
		id := ann.newestCallID("send_email", "approval")
		// The screen reader hears the answer once, then that a card waits (not every streamed word).
		ann.until(`window.__announced.includes("A card needs your decision.")`)
		said := eval[[]string](ann, `window.__announced.filter(s => s !== "")`)
		if len(said) < 2 || !strings.HasPrefix(said[0], "Assistant: ") || len(said) > 3 {
			t.Errorf("announced %q, want the answer then the card", said)
		}
		if eval[string](ann, `document.getElementById("announce").getAttribute("aria-live")`) != "polite" {
			t.Errorf("the announcements are not a polite live region")
		}
		// The arguments are edited in the form built from the schema, and the edit is what ran.
		ann.do(chromedp.Click(chromedp.CSS(callSel(id) + ` details[data-parley="edit"] > summary`)))
		subject := callSel(id) + ` [data-parley="args-form"] input[name="arg.subject"]`
		eval[bool](ann, `(document.querySelector(`+q(subject)+`).value = "", true)`)
		ann.do(chromedp.SendKeys(chromedp.CSS(subject), "Lunch on Friday"))
		// The card's plan follows the edit (hooks.js posts the form to the plan route).
		plan := callSel(id) + ` [data-parley="approval"] [data-parley="plan"]`
		ann.until(`(() => { const p = document.querySelector(` + q(plan) + `); return p !== null && !p.hasAttribute("data-stale") && p.querySelector(".plan-summary").textContent.includes('"Lunch on Friday"'); })()`)
		ann.shot("plan-follows-edit")
		// An edit the schema refuses keeps the last plan, marked stale; the next good one clears it.
		to := callSel(id) + ` [data-parley="args-form"] input[name="arg.to"]`
		was := eval[string](ann, `document.querySelector(`+q(to)+`).value`)
		eval[bool](ann, `(document.querySelector(`+q(to)+`).value = "", true)`)
		ann.do(chromedp.SendKeys(chromedp.CSS(to), "nobody"))
		ann.until(`(() => { const p = document.querySelector(` + q(plan) + `); return p.hasAttribute("data-stale") && p.querySelector(".plan-summary").textContent.includes("Lunch on Friday"); })()`)
		eval[bool](ann, `(document.querySelector(`+q(to)+`).value = "", true)`)
		ann.do(chromedp.SendKeys(chromedp.CSS(to), was))
		ann.until(`(() => { const p = document.querySelector(` + q(plan) + `); return !p.hasAttribute("data-stale") && p.querySelector(".plan-summary").textContent.includes(` + q(was) + `); })()`)
		ann.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
		ann.until(callStatusIs(id, "resolved"))
		ann.until(`document.querySelector(` + q(callSel(id)) + `).innerText.includes("Lunch on Friday")`)
		ann.shot("edited-arguments-approved")
	})

	t.Run("a skip link leads to the content", func(t *testing.T) {
		ann.do(chromedp.Navigate(h.url + "/conversations"))
		ann.do(chromedp.KeyEvent("\t"))
		if !eval[bool](ann, `document.activeElement !== null && document.activeElement.dataset.parley === "skip-link"`) {
			t.Fatalf("the first Tab does not reach the skip link")
		}
		ann.do(chromedp.KeyEvent("\r"))
		ann.until(`document.activeElement !== null && document.activeElement.id === "main"`)
	})

	t.Run("390 px: no sideways scroll, 44 px buttons, the page follows and offers jump to latest", func(t *testing.T) {
		if _, err := chromedp.Call(ann.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: 390, Height: 640, DeviceScaleFactor: 2, Mobile: true}); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = chromedp.Call(ann.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}) }()
		ann.newConversation("Phone")
		ann.say("what time is it")
		ann.until(`document.querySelector('[data-parley="tool-call"][data-tool="get_current_time"]') !== null`)
		ann.until(statusIs("idle"))
		ann.say("email bob@example.com about lunch")
		ann.until(statusTextHas("Waiting for your answer"))
		if w := eval[float64](ann, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("the page is %.0f px wide at 390 px", w)
		}
		// Sign out is in the account menu, which opens on screen.
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="account-menu"] > summary`)))
		if !eval[bool](ann, `(() => { const b = document.querySelector('form[action="/logout"] button'); const r = b.getBoundingClientRect(); return r.right <= 390 && r.left >= 0 && r.width > 0; })()`) {
			t.Errorf("Sign out is off-screen")
		}
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="account-menu"] > summary`)))
		small := eval[[]string](ann, `Array.from(document.querySelectorAll('button')).filter(b => b.offsetParent !== null).filter(b => { const r = b.getBoundingClientRect(); return r.height < 44 || r.width < 44; }).map(b => b.textContent.trim())`)
		if len(small) > 0 {
			t.Errorf("buttons under 44 px: %q", small)
		}
		ann.shot("phone-390")
		// Scrolled up, new content does not move the page: a button offers the latest.
		ann.do(chromedp.Click(chromedp.CSS(stopButton)))
		ann.until(statusIs("idle"))
		eval[bool](ann, `(window.scrollTo(0, 0), true)`)
		ann.until(`window.scrollY === 0`)
		ann.say("count down from 2")
		ann.until(`!document.querySelector('[data-parley="jump"]').hidden`)
		if y := eval[float64](ann, `window.scrollY`); y > 0 {
			t.Errorf("the page moved to %.0f while the person read above", y)
		}
		ann.shot("jump-to-latest")
		ann.do(chromedp.Click(chromedp.CSS(`[data-parley="jump"]`)))
		ann.until(`document.querySelector('[data-parley="jump"]').hidden`)
		ann.until(`window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 100`)
		// Following again: the countdown's end arrives with the page at the bottom.
		ann.until(statusIs("idle"))
		ann.until(`window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 100`)
	})
}
