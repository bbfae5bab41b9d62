package views

import (
	"bytes"
	"container/list"
	"context"
	"html"
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"

	"github.com/a-h/templ"
	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// The model's Markdown goes through two independent guards. goldmark renders it without its
// unsafe mode, so raw HTML in the source is dropped and dangerous link schemes are blanked; a
// transformer replaces images that do not come from the app itself with their alt text. Then
// bluemonday sanitizes the HTML with an allow-list, so even a goldmark bug cannot smuggle a
// script, an event handler, a javascript: URL or a foreign image onto the page.
var (
	md = goldmark.New(
		goldmark.WithExtensions(extension.GFM),
		goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(localImagesOnly{}, 100))),
		goldmark.WithRendererOptions(renderer.WithNodeRenderers(util.Prioritized(literalHTML{}, 100), util.Prioritized(codeBlocks{}, 100))),
	)
	sanitizer = newSanitizer()
)

// localImage matches an image source the app serves itself: an absolute path, not a
// protocol-relative URL ("//host/…") and not a backslash trick ("/\host").
var localImage = regexp.MustCompile(`^/[^/\\]`)

func newSanitizer() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.AllowElements("p", "br", "hr", "em", "strong", "del", "blockquote", "ul", "ol", "li",
		"h1", "h2", "h3", "h4", "h5", "h6", "pre", "code", "table", "thead", "tbody", "tr", "th", "td", "sup", "sub")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[a-zA-Z0-9_+-]+$`)).OnElements("code")
	// Highlighted code (highlight.go): the block's class and chroma's token classes, nothing else.
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^code$`)).OnElements("pre")
	p.AllowAttrs("data-lang").Matching(langName).OnElements("pre")
	p.AllowElements("span")
	p.AllowAttrs("class").Matching(chromaClass).OnElements("span")
	p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|right|center)$`)).OnElements("th", "td")
	p.AllowAttrs("start").Matching(bluemonday.Integer).OnElements("ol")
	p.AllowAttrs("href").OnElements("a")
	p.AllowAttrs("src").Matching(localImage).OnElements("img")
	p.AllowAttrs("alt", "title").OnElements("img", "a")
	// Task lists from GFM.
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^(|checked|disabled)$`)).OnElements("input")
	p.AllowURLSchemes("http", "https", "mailto")
	p.AllowRelativeURLs(true)
	p.RequireParseableURLs(true)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return p
}

// localImagesOnly replaces every image whose destination is not a path on this app by its alt
// text, so the page never loads (or leaks the reader's address to) a foreign host.
type localImagesOnly struct{}

func (localImagesOnly) Transform(doc *ast.Document, reader text.Reader, _ parser.Context) {
	var foreign []*ast.Image
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if img, ok := n.(*ast.Image); ok && entering && !isLocalImage(string(img.Destination)) {
			foreign = append(foreign, img)
		}
		return ast.WalkContinue, nil
	})
	for _, img := range foreign {
		parent := img.Parent()
		for c := img.FirstChild(); c != nil; {
			next := c.NextSibling()
			parent.InsertBefore(parent, img, c)
			c = next
		}
		parent.RemoveChild(parent, img)
	}
}

func isLocalImage(dest string) bool {
	if !localImage.MatchString(dest) {
		return false
	}
	u, err := url.Parse(dest)
	return err == nil && u.Scheme == "" && u.Host == ""
}

// literalHTML shows raw HTML in the model's Markdown as the text it is, escaped, instead of
// dropping it: a model that writes "<br>" or "<script>" gets it shown, never interpreted.
type literalHTML struct{}

func (literalHTML) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindHTMLBlock, func(w util.BufWriter, source []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		b := n.(*ast.HTMLBlock)
		_, _ = w.WriteString("<p>")
		lines := b.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			_, _ = w.WriteString(html.EscapeString(string(seg.Value(source))))
		}
		if b.HasClosure() {
			_, _ = w.WriteString(html.EscapeString(string(b.ClosureLine.Value(source))))
		}
		_, _ = w.WriteString("</p>\n")
		return ast.WalkSkipChildren, nil
	})
	reg.Register(ast.KindRawHTML, func(w util.BufWriter, source []byte, n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkSkipChildren, nil
		}
		segs := n.(*ast.RawHTML).Segments
		for i := 0; i < segs.Len(); i++ {
			seg := segs.At(i)
			_, _ = w.WriteString(html.EscapeString(string(seg.Value(source))))
		}
		return ast.WalkSkipChildren, nil
	})
}

// RenderMarkdown turns model Markdown into sanitized HTML. Messages never change once logged
// and the socket re-renders a page's items to see what changed, so results are cached.
func RenderMarkdown(src string) string {
	if html, ok := mdCache.get(src); ok {
		return html
	}
	html := renderMarkdown(src)
	mdCache.put(src, html)
	return html
}

func renderMarkdown(src string) string {
	var buf bytes.Buffer
	if err := md.Convert([]byte(src), &buf); err != nil {
		// goldmark only fails on writer errors; fall back to the escaped source.
		return "<p>" + templ.EscapeString(src) + "</p>"
	}
	return strings.TrimSpace(sanitizer.Sanitize(buf.String()))
}

// Markdown renders model Markdown, sanitized, as a component.
func Markdown(src string) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, RenderMarkdown(src))
		return err
	})
}

// StreamingMarkdown renders the text streamed so far by the same rule as Markdown, without the
// cache: each partial text is rendered once, and keeping them would evict the logged messages.
func StreamingMarkdown(src string) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, renderMarkdown(src))
		return err
	})
}

// mdCache holds the most recently rendered messages, evicting the least recently used beyond
// its bounds: mdCacheEntries entries and mdCacheBytes bytes of Markdown and HTML together; keys
// are the Markdown sources themselves (a hash would need collision handling). A message whose
// source and HTML take more than a sixteenth of the bytes is rendered each time, not cached: one
// huge answer would otherwise evict everything else.
var mdCache = newLRU(mdCacheEntries, mdCacheBytes)

const (
	mdCacheEntries = 2048
	mdCacheBytes   = 32 << 20
)

type lruEntry struct{ key, val string }

// cost is what an entry holds: its key and its value.
func (e *lruEntry) cost() int { return len(e.key) + len(e.val) }

type lru struct {
	mu       sync.Mutex
	size     int        // most entries
	maxBytes int        // most bytes of keys and values; an entry over maxBytes/16 is not kept
	bytes    int        // guarded by mu
	order    *list.List // front: most recent; guarded by mu
	items    map[string]*list.Element
}

func newLRU(size, maxBytes int) *lru {
	return &lru{size: size, maxBytes: maxBytes, order: list.New(), items: map[string]*list.Element{}}
}

func (c *lru) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[k]
	if !ok {
		return "", false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry).val, true
}

func (c *lru) put(k, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		return
	}
	ent := &lruEntry{k, v}
	if ent.cost() > c.maxBytes/16 {
		return
	}
	c.items[k] = c.order.PushFront(ent)
	c.bytes += ent.cost()
	for c.order.Len() > c.size || c.bytes > c.maxBytes {
		last := c.order.Back()
		c.order.Remove(last)
		old := last.Value.(*lruEntry)
		delete(c.items, old.key)
		c.bytes -= old.cost()
	}
}
