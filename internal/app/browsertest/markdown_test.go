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
// code on the clipboard; the block shows its language, and its token colours read at 4.5:1 or
// better in light and dark.
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

	// The block says its language in a small label, and every token colour the stylesheet
	// has (not only the tokens of this answer) reads at 4.5:1 or better on the code's
	// background, light and dark.
	for _, scheme := range []string{"light", "dark"} {
		colorScheme(t, ann, scheme)
		if label := eval[string](ann, `(() => { const p = document.querySelector('pre.code[data-lang]'); const s = getComputedStyle(p, "::before");
			return s.display !== "none" && s.visibility !== "hidden" ? s.content : ""; })()`); label != `"go"` {
			t.Errorf("%s: the code block's label is %s, want \"go\"", scheme, label)
		}
		for _, low := range eval[[]string](ann, codeContrast) {
			t.Errorf("%s: a code token under 4.5:1: %s", scheme, low)
		}
		ann.shot("code-block-" + scheme)
	}
	colorScheme(t, ann, "")
}

// codeContrast lists the code token classes (each "pre.code .x" rule of the stylesheets, and
// every token span on the page) whose colour is under 4.5:1 against what they are drawn on;
// whitespace tokens (.w) show no glyph and are left out.
const codeContrast = `(() => {
	const lum = (c) => {
		const m = c.match(/rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?/);
		if (!m) return null;
		const ch = [m[1], m[2], m[3]].map(Number).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
		return {l: 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2], a: m[4] === undefined ? 1 : Number(m[4])};
	};
	const background = (el) => {
		for (let e = el; e; e = e.parentElement) {
			const b = lum(getComputedStyle(e).backgroundColor);
			if (b && b.a > 0) return b.l;
		}
		return 1;
	};
	const ratio = (el) => {
		const f = lum(getComputedStyle(el).color).l, b = background(el);
		return (Math.max(f, b) + 0.05) / (Math.min(f, b) + 0.05);
	};
	const pre = document.querySelector('[data-parley="message"] pre.code');
	const classes = new Set();
	const walk = (rules) => { for (const r of rules) {
		if (r.cssRules) walk(r.cssRules);
		for (const sel of (r.selectorText || "").split(",")) { const m = sel.trim().match(/^pre\.code \.([a-z0-9]+)$/); if (m) classes.add(m[1]); }
	} };
	for (const sh of document.styleSheets) walk(sh.cssRules);
	const probe = document.createElement("code");
	for (const c of classes) { const s = document.createElement("span"); s.className = c; s.textContent = "x"; probe.appendChild(s); }
	pre.appendChild(probe);
	const low = [];
	try {
		for (const s of pre.querySelectorAll("span[class]")) {
			if (s.className === "w" || s.textContent.trim() === "") continue;
			const r = ratio(s);
			if (r < 4.5) low.push("." + s.className + " " + JSON.stringify(s.textContent) + " " + r.toFixed(2) + ":1 (" + getComputedStyle(s).color + ")");
		}
		if (classes.size < 40) low.push("only " + classes.size + " token rules found in the stylesheets");
	} finally {
		probe.remove();
	}
	return low;
})()`
