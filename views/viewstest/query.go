// Package viewstest selects elements of rendered HTML with a small subset of CSS selectors, so
// view and handler tests check the page's stable attributes (data-parley="…") rather than
// markup details.
package viewstest

import (
	"fmt"
	"strings"

	"golang.org/x/net/html"
)

// Doc is parsed HTML.
type Doc struct{ root *html.Node }

// Parse parses a page or a fragment (fragments are parsed in a <body> context).
func Parse(s string) (*Doc, error) {
	n, err := html.Parse(strings.NewReader(s))
	if err != nil {
		return nil, fmt.Errorf("parse html: %w", err)
	}
	return &Doc{root: n}, nil
}

// MustParse is Parse that panics, for tests.
func MustParse(s string) *Doc {
	d, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return d
}

// compound is one step of a selector: tag (or "" for any) and attribute conditions.
type compound struct {
	tag   string
	attrs []attrCond
}

type attrCond struct {
	name  string
	value string
	has   bool // [name] without a value
}

// parseSelector reads "a[b='c'] d[e]"-style descendant selectors (tag, [attr], [attr="v"]).
func parseSelector(sel string) ([]compound, error) {
	var out []compound
	i := 0
	for i < len(sel) {
		for i < len(sel) && sel[i] == ' ' {
			i++
		}
		if i >= len(sel) {
			break
		}
		var c compound
		start := i
		for i < len(sel) && sel[i] != '[' && sel[i] != ' ' {
			i++
		}
		c.tag = sel[start:i]
		if c.tag == "*" {
			c.tag = ""
		}
		for i < len(sel) && sel[i] == '[' {
			end := strings.IndexByte(sel[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("selector %q: unclosed [", sel)
			}
			body := sel[i+1 : i+end]
			i += end + 1
			if eq := strings.IndexByte(body, '='); eq >= 0 {
				v := strings.Trim(body[eq+1:], `"'`)
				c.attrs = append(c.attrs, attrCond{name: body[:eq], value: v})
			} else {
				c.attrs = append(c.attrs, attrCond{name: body, has: true})
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return out, nil
}

func (c compound) match(n *html.Node) bool {
	if n.Type != html.ElementNode || (c.tag != "" && n.Data != c.tag) {
		return false
	}
	for _, a := range c.attrs {
		v, ok := Attr(n, a.name)
		if !ok || (!a.has && v != a.value) {
			return false
		}
	}
	return true
}

// All returns the elements matching sel, in document order.
func (d *Doc) All(sel string) []*html.Node { return all(d.root, sel) }

// In returns the elements under n matching sel.
func In(n *html.Node, sel string) []*html.Node { return all(n, sel) }

func all(root *html.Node, sel string) []*html.Node {
	steps, err := parseSelector(sel)
	if err != nil {
		panic(err)
	}
	var out []*html.Node
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n != root && matches(n, root, steps) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	return out
}

// matches checks the last step against n and the earlier steps against n's ancestors (below root).
func matches(n, root *html.Node, steps []compound) bool {
	last := len(steps) - 1
	if !steps[last].match(n) {
		return false
	}
	k := last - 1
	for p := n.Parent; p != nil && p != root.Parent && k >= 0; p = p.Parent {
		if steps[k].match(p) {
			k--
		}
	}
	return k < 0
}

// One returns the only element matching sel, or nil with the count when there is not exactly one.
func (d *Doc) One(sel string) (*html.Node, int) {
	ns := d.All(sel)
	if len(ns) != 1 {
		return nil, len(ns)
	}
	return ns[0], 1
}

// Attr returns an attribute of n.
func Attr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

// Text returns the text content of n, whitespace collapsed.
func Text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// Walk calls fn for every element of the document.
func (d *Doc) Walk(fn func(n *html.Node)) {
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			fn(n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(d.root)
}
