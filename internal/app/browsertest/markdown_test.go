package browsertest

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// TestBrowserCodeBlocks: a code block in the assistant's answer is highlighted by the server
// (chroma's token classes, coloured by the stylesheet) and gets a copy button that puts the
// code on the clipboard.
func TestBrowserCodeBlocks(t *testing.T) {
	t.Parallel()
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
	// Watch the streaming bubble while the answer streams (the demo model sends it word by word):
	// it shows rendered Markdown (never the raw "**"), and the logged message takes its place at
	// the same position and size.
	eval[bool](ann, `(() => {
		const w = window.streamWatch = {renders: 0, rendered: false, raw: false, last: null, final: null};
		new MutationObserver(() => {
			const s = document.querySelector('[data-parley="message-streaming"]');
			if (s) {
				w.renders++;
				if (s.querySelector('.markdown strong')) w.rendered = true;
				if (s.textContent.includes("**")) w.raw = true;
				const r = s.getBoundingClientRect();
				w.last = {top: r.top + scrollY, height: r.height, text: s.querySelector('.message-body').innerHTML};
			}
			const m = document.querySelector('[data-parley="message"][data-role="assistant"]');
			if (m && !w.final) {
				const r = m.getBoundingClientRect();
				w.final = {top: r.top + scrollY, height: r.height, both: s !== null, text: m.querySelector('.message-body').innerHTML};
			}
		}).observe(document.body, {childList: true, subtree: true, characterData: true});
		return true;
	})()`)
	ann.say("show me some code")
	ann.until(`document.querySelector('[data-parley="message"][data-role="assistant"] pre.code code.language-go') !== null`)
	type box struct {
		Top, Height float64
		Text        string
		Both        bool
	}
	var watch struct {
		Renders     int
		Rendered    bool
		Raw         bool
		Last, Final *box
	}
	if err := json.Unmarshal([]byte(eval[string](ann, `JSON.stringify(window.streamWatch)`)), &watch); err != nil {
		t.Fatal(err)
	}
	switch {
	case watch.Renders == 0 || watch.Last == nil || watch.Final == nil:
		t.Errorf("the answer never streamed into the bubble: %+v", watch)
	case !watch.Rendered || watch.Raw:
		t.Errorf("the streaming bubble showed raw Markdown (rendered %v, raw ** seen %v)", watch.Rendered, watch.Raw)
	case watch.Final.Both:
		t.Errorf("the streaming bubble stayed beside the logged message")
	case math.Abs(watch.Last.Top-watch.Final.Top) > 0.5 || math.Abs(watch.Last.Height-watch.Final.Height) > 0.5:
		t.Errorf("the logged message jumped: streaming bubble at %.1f (height %.1f), message at %.1f (height %.1f)",
			watch.Last.Top, watch.Last.Height, watch.Final.Top, watch.Final.Height)
	}
	t.Logf("streaming: %d renders of the bubble", watch.Renders)
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
