package views

import (
	"strings"
	"testing"
)

func TestCodeBlocksHighlightedAndSafe(t *testing.T) {
	out := RenderMarkdown("Here:\n\n```go\nfunc main() { fmt.Println(\"<script>alert(1)</script>\") }\n```\n")
	// The block names its language (data-lang, shown by the stylesheet as its label).
	if !strings.Contains(out, `<pre class="code" data-lang="go"><code class="language-go">`) {
		t.Fatalf("no code block: %s", out)
	}
	if !strings.Contains(out, `<span class="kd">func</span>`) {
		t.Errorf("go is not highlighted: %s", out)
	}
	if strings.Contains(out, "<script>") || !strings.Contains(out, "&lt;script&gt;") {
		t.Errorf("code is not escaped: %s", out)
	}
	if strings.Contains(out, "style=") {
		t.Errorf("inline styles: %s", out)
	}
	_, doc := render(t, Markdown("```js\nalert(1)\n```\n\n```\nplain <b>\n```\n\n```a\"onmouseover=alert(1)\nx\n```"))
	assertInert(t, doc)
	if n := len(doc.All(`pre[class="code"]`)); n != 3 {
		t.Errorf("%d code blocks, want 3", n)
	}
	// A language chroma does not know, or a block too big: plain, escaped.
	out = RenderMarkdown("```nosuchlang\n<i>x</i>\n```")
	if strings.Contains(out, "<span") || !strings.Contains(out, "&lt;i&gt;x&lt;/i&gt;") {
		t.Errorf("unknown language: %s", out)
	}
	big := "```go\n" + strings.Repeat("x := 1\n", maxHighlight/7+10) + "```"
	if out := RenderMarkdown(big); strings.Contains(out, "<span") {
		t.Errorf("a block past the bound was highlighted")
	}
	// A block without a language has no label; a label is only ever a language name.
	if out := RenderMarkdown("```\nplain\n```"); strings.Contains(out, "data-lang") {
		t.Errorf("a block without a language is labelled: %s", out)
	}
	if got := sanitizer.Sanitize(`<pre class="code" data-lang="x&#34; onclick=&#34;y">z</pre><pre data-lang="rust">w</pre>`); got != `<pre class="code">z</pre><pre data-lang="rust">w</pre>` {
		t.Errorf("sanitizer on data-lang: %s", got)
	}
	// The sanitizer keeps only chroma's short class names on spans.
	if got := sanitizer.Sanitize(`<span class="evil-class">x</span><span class="kd">y</span>`); got != `<span>x</span><span class="kd">y</span>` {
		t.Errorf("sanitizer on spans: %s", got)
	}
}
