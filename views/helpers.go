package views

import (
	"bytes"
	"context"
	"encoding/hex"
	"hash/fnv"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"parley/internal/agent"

	"github.com/a-h/templ"
	"golang.org/x/net/idna"
)

func titleOr(t string) string {
	if t == "" {
		return "New conversation"
	}
	return t
}

// convStatusText says in words what a conversation in a list is doing (idle shows nothing).
func convStatusText(status string) string {
	switch status {
	case agent.StatusGenerating, agent.StatusDispatching:
		return "working"
	case agent.StatusAwaiting:
		return "waiting for an answer"
	}
	return status
}

func roleText(role string) string {
	switch role {
	case "user":
		return "You"
	case "assistant":
		return "Assistant"
	case "error":
		return "Error"
	case "stopped":
		return ""
	}
	return role
}

func urlPart(s string) string { return url.PathEscape(s) }

// revItem renders inner, then writes it inside <div id=… class=… data-rev=…> where data-rev
// is a hash of inner's HTML.
func revItem(id, class string, inner templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		out, _, err := renderRev(ctx, id, class, inner)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	})
}

func renderRev(ctx context.Context, id, class string, inner templ.Component) ([]byte, string, error) {
	var buf bytes.Buffer
	if err := inner.Render(ctx, &buf); err != nil {
		return nil, "", err
	}
	h := fnv.New64a()
	_, _ = h.Write(buf.Bytes())
	rev := hex.EncodeToString(h.Sum(nil))
	var out bytes.Buffer
	out.Grow(buf.Len() + 96)
	out.WriteString(`<div id="`)
	out.WriteString(templ.EscapeString(id))
	out.WriteString(`" class="`)
	out.WriteString(templ.EscapeString(class))
	out.WriteString(`" data-rev="`)
	out.WriteString(rev)
	out.WriteString(`">`)
	out.Write(buf.Bytes())
	out.WriteString(`</div>`)
	return out.Bytes(), rev, nil
}

// ItemHTML renders one timeline item as TimelineItem does, and returns its data-rev too, so a
// socket can tell whether the page's copy is current without parsing HTML.
func ItemHTML(ctx context.Context, p Page, it Item) (html []byte, rev string, err error) {
	if it.Call != nil {
		return renderRev(ctx, it.DOMID(), "item item-call", ToolCallCard(p, *it.Call))
	}
	return renderRev(ctx, it.DOMID(), "item item-message", MessageView(*it.Message))
}

// InboxItemHTML renders one inbox entry as InboxList does, with its data-rev.
func InboxItemHTML(ctx context.Context, d InboxPage, e InboxEntry) (html []byte, rev string, err error) {
	return renderRev(ctx, InboxDOMID(e.ConversationID, e.Call.ID), "item inbox-item", InboxItem(d, e))
}

func fieldID(callID, name string) string { return "q-" + callID + "-" + name }

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// fieldValue is the value a field shows: what was submitted, else the schema's default.
func fieldValue(fl Field, f *FormState) string {
	if v, ok := f.Value(fl.Name); ok {
		return v
	}
	return fl.DefaultText()
}

func checkedValue(fl Field, f *FormState) bool {
	if f != nil && f.Values != nil {
		v := f.Values[fl.Name]
		return v == "on" || v == "true"
	}
	b, _ := fl.Default.(bool)
	return b
}

func formValue(f *FormState, name string) string {
	v, _ := f.Value(name)
	return v
}

// argsValue is the arguments field: what was submitted, else the call's arguments.
func argsValue(c agent.CallView, f *FormState) string {
	if v, ok := f.Value("args"); ok {
		return v
	}
	return prettyJSON(c.Args)
}

func rowsFor(s string) int {
	n := strings.Count(s, "\n") + 1
	return min(max(n+1, 3), 16) // one spare line: long values wrap
}

func itoa(n int) string { return strconv.Itoa(n) }

// urlHost is the host a URL-mode question's link goes to, as the person should read it before
// opening it ("" when it has none: the agent accepts only http(s) links with a host).
// The host is shown as the browser's address bar will show it: in ASCII (punycode), so a name
// spelled with look-alike letters ("аррle.com" in Cyrillic) does not read as another.
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	host, err := idna.Lookup.ToASCII(u.Hostname())
	if err != nil {
		return ""
	}
	if port := u.Port(); port != "" {
		return net.JoinHostPort(host, port)
	}
	return host
}

// SnippetPart is a piece of a search excerpt: text, matched (highlighted) or not.
type SnippetPart struct {
	Text  string
	Match bool
}

// SnippetParts splits an excerpt (agent.SearchMatch.Snippet) at its markers; the parts are
// plain text, escaped where they are shown. A marker without its pair ends the highlight.
func SnippetParts(s string) []SnippetPart {
	var parts []SnippetPart
	for s != "" {
		i := strings.Index(s, agent.SnippetMark)
		if i < 0 {
			parts = append(parts, SnippetPart{Text: strings.ReplaceAll(s, agent.SnippetEnd, "")})
			break
		}
		if i > 0 {
			parts = append(parts, SnippetPart{Text: strings.ReplaceAll(s[:i], agent.SnippetEnd, "")})
		}
		s = s[i+len(agent.SnippetMark):]
		j := strings.Index(s, agent.SnippetEnd)
		if j < 0 {
			j = len(s)
		}
		if m := strings.ReplaceAll(s[:j], agent.SnippetMark, ""); m != "" {
			parts = append(parts, SnippetPart{Text: m, Match: true})
		}
		s = s[min(j+len(agent.SnippetEnd), len(s)):]
	}
	return parts
}
