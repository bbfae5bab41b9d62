package browsertest

import (
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// TestBrowserCodeBlocks: a code block in the assistant's answer is highlighted by the server
// (chroma's token classes, coloured by the stylesheet) and gets a copy button that puts the
// code on the clipboard.
func TestBrowserCodeBlocks(t *testing.T) {
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")
	for _, perm := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(ann.ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: perm}, Setting: browser.PermissionSettingGranted, Origin: h.url,
			BrowserContextID: browserContextID(ann)}); err != nil {
			t.Fatalf("grant %s: %v", perm, err)
		}
	}
	ann.newConversation("Code")
	ann.say("show me some code")
	ann.until(`document.querySelector('[data-parley="message"][data-role="assistant"] pre.code code.language-go') !== null`)
	// Highlighted: keywords are spans with chroma's class, coloured (not the text colour).
	if !eval[bool](ann, `(() => {
		const kw = document.querySelector('pre.code span.kd, pre.code span.kn');
		if (kw === null) return false;
		const code = document.querySelector('pre.code code');
		return getComputedStyle(kw).color !== getComputedStyle(code).color;
	})()`) {
		t.Errorf("the code block is not highlighted")
	}
	ann.until(`document.querySelector('.code-block [data-parley="copy-code"]') !== null`)
	ann.do(chromedp.Click(chromedp.CSS(`[data-parley="copy-code"]`)))
	ann.until(`document.querySelector('[data-parley="copy-code"]').textContent === "Copied"`)
	eval[bool](ann, `(navigator.clipboard.readText().then(t => { window.clipText = t; }), true)`)
	ann.until(`typeof window.clipText === "string"`)
	got := eval[string](ann, `window.clipText`)
	want := eval[string](ann, `document.querySelector('pre.code').textContent`)
	if got != want || len(got) < 20 {
		t.Errorf("the clipboard holds %q, want the code %q", got, want)
	}
	ann.shot("code-block")
}
