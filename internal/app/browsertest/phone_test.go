package browsertest

import (
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// phone makes the tab a 390×844 phone until the test ends.
func phone(t *testing.T, tb *tab) {
	t.Helper()
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 390, Height: 844, DeviceScaleFactor: 2, Mobile: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = chromedp.Call(tb.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}) })
}

// colorScheme makes the tab prefer a light or a dark colour scheme ("" for the browser's own).
func colorScheme(t *testing.T, tb *tab, scheme string) {
	t.Helper()
	var features []*emulation.MediaFeature
	if scheme != "" {
		features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
	}
	if _, err := chromedp.Call(tb.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features}); err != nil {
		t.Fatal(err)
	}
	if scheme != "" && !eval[bool](tb, `matchMedia("(prefers-color-scheme: `+scheme+`)").matches`) {
		t.Fatalf("the page does not prefer %s", scheme)
	}
}

// TestBrowserPhoneHeader: at 390×844 the chat's headers are one line each — the site header
// keeps its places and folds the account's pages into a menu, the conversation's head cuts a
// long title with an ellipsis (never inside a word, the whole title on hover) — so the first
// message starts on screen and nothing scrolls sideways; axe finds nothing serious, light or
// dark.
func TestBrowserPhoneHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	defer h.checkConsole()
	rita := h.browserFor("rita") // a reviewer: the header also has the Inbox
	phone(t, rita)
	const title = "Questions about the offsite in November and who books the train"
	rita.newConversation(title)
	rita.say("what time is it")
	rita.until(`document.querySelector('[data-parley="message"][data-role="assistant"]') !== null`)
	rita.until(statusIs("idle"))
	rita.do(chromedp.Reload())
	rita.until(`document.documentElement.dataset.parleySocket === "open"`)

	if hh := eval[float64](rita, `document.querySelector(".site-header").getBoundingClientRect().height`); hh > 64 {
		t.Errorf("the site header is %.0f px tall at 390 px, want one line (≤ 64)", hh)
	}
	if hh := eval[float64](rita, `document.querySelector(".conversation-head").getBoundingClientRect().height`); hh > 56 {
		t.Errorf("the conversation's head is %.0f px tall at 390 px, want one line (≤ 56)", hh)
	}
	type titleBox struct {
		WhiteSpace, TextOverflow, Title, Text string
		Lines                                 float64
		Cut                                   bool
	}
	head := eval[titleBox](rita, `(() => { const h = document.querySelector('[data-parley="conversation-title"]'); const s = getComputedStyle(h);
		return {whiteSpace: s.whiteSpace, textOverflow: s.textOverflow, title: h.title, text: h.textContent,
			lines: h.getBoundingClientRect().height / parseFloat(s.lineHeight), cut: h.scrollWidth > h.clientWidth}; })()`)
	if head.Lines > 1.5 || head.TextOverflow != "ellipsis" || head.WhiteSpace != "nowrap" || !head.Cut {
		t.Errorf("the long title is not one line cut with an ellipsis: %+v", head)
	}
	if head.Title != title || head.Text != title {
		t.Errorf("the title's text %q and title attribute %q, want the whole title", head.Text, head.Title)
	}
	if w := eval[float64](rita, `document.scrollingElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("the page scrolls %.0f px sideways at 390 px", w)
	}
	eval[bool](rita, `(window.scrollTo(0, 0), true)`)
	rita.until(`window.scrollY === 0`)
	if top := eval[float64](rita, `document.querySelector('[data-parley="message"]').getBoundingClientRect().top`); top > 844-48 {
		t.Errorf("the first message starts at %.0f px, below the fold of an 844 px screen", top)
	}
	rita.shot("phone-header")

	// The account menu opens on screen with Sign out in it.
	rita.do(chromedp.Click(chromedp.CSS(`[data-parley="account-menu"] > summary`)))
	if !eval[bool](rita, `(() => { const r = document.querySelector('[data-parley="account-menu"] form[action="/logout"] button').getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; })()`) {
		t.Errorf("the open account menu puts Sign out off screen")
	}
	if w := eval[float64](rita, `document.scrollingElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("with the account menu open the page scrolls %.0f px sideways", w)
	}
	rita.shot("phone-account-menu")
	rita.do(chromedp.Click(chromedp.CSS(`[data-parley="account-menu"] > summary`)))

	for _, scheme := range []string{"light", "dark"} {
		colorScheme(t, rita, scheme)
		rita.checkA11y(t, "conversation at 390 px, "+scheme)
		rita.shot("phone-conversation-" + scheme)
	}
	colorScheme(t, rita, "")
}
