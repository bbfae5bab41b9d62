package views

import (
	"strings"
	"testing"
)

func TestCodeBlocksHighlightedAndSafe(t *testing.T) {
	out := RenderMarkdown("Here:\n\n```go\nfunc main() { fmt.Println(\"<script>alert(1)</script>\") }\n```\n")
	if !strings.Contains(out, `<pre class="code"><code class="language-go">`) {
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
	// The sanitizer keeps only chroma's short class names on spans.
	if got := sanitizer.Sanitize(`<span class="evil-class">x</span><span class="kd">y</span>`); got != `<span>x</span><span class="kd">y</span>` {
		t.Errorf("sanitizer on spans: %s", got)
	}
}
