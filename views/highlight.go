package views

import (
	"bytes"
	"html"
	"regexp"
	"strings"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"
)

// Code blocks of the model's Markdown are highlighted on the server with chroma: tokens become
// <span class="…"> with chroma's short class names (no inline styles: the CSP allows none, and
// the sanitizer keeps only class names of that shape), coloured by static/css/app.css. Only a
// block whose language chroma knows is highlighted, and only up to maxHighlight bytes: past
// that the block is plain, escaped text. hooks.js adds a copy button to every block.

// maxHighlight bounds the code chroma tokenizes per block.
const maxHighlight = 32 << 10

var codeFormatter = chromahtml.New(chromahtml.WithClasses(true), chromahtml.PreventSurroundingPre(true))

// chromaClass matches the class names chroma writes on its token spans ("k", "nf", "s2", "err").
var chromaClass = regexp.MustCompile(`^[a-z][a-z0-9]{0,3}$`)

// langName keeps a fence's language to a safe class suffix.
var langName = regexp.MustCompile(`^[a-zA-Z0-9_+-]{1,32}$`)

// codeBlocks renders fenced code blocks highlighted.
type codeBlocks struct{}

func (codeBlocks) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindFencedCodeBlock, func(w util.BufWriter, source []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkSkipChildren, nil
		}
		b := n.(*ast.FencedCodeBlock)
		var code bytes.Buffer
		lines := b.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			code.Write(seg.Value(source))
		}
		lang := ""
		if l := b.Language(source); l != nil && langName.Match(l) {
			lang = strings.ToLower(string(l))
		}
		_, _ = w.WriteString(highlightBlock(lang, code.String()))
		return ast.WalkSkipChildren, nil
	})
}

// highlightBlock is one code block as HTML: <pre class="code" data-lang="x"><code
// class="language-x">…</code></pre>; the stylesheet shows data-lang as the block's label.
func highlightBlock(lang, code string) string {
	var out strings.Builder
	if lang == "" {
		out.WriteString(`<pre class="code"><code>`)
	} else {
		out.WriteString(`<pre class="code" data-lang="` + lang + `"><code class="language-` + lang + `">`)
	}
	if body, ok := highlighted(lang, code); ok {
		out.WriteString(body)
	} else {
		out.WriteString(html.EscapeString(code))
	}
	out.WriteString("</code></pre>\n")
	return out.String()
}

func highlighted(lang, code string) (string, bool) {
	if lang == "" || len(code) > maxHighlight {
		return "", false
	}
	lexer := lexers.Get(lang)
	if lexer == nil {
		return "", false
	}
	it, err := chroma.Coalesce(lexer).Tokenise(nil, code)
	if err != nil {
		return "", false
	}
	var buf bytes.Buffer
	if err := codeFormatter.Format(&buf, styles.Fallback, it); err != nil {
		return "", false
	}
	return buf.String(), true
}
