package httpadapter

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// placeholderRE matches one {{ name }} placeholder.
var placeholderRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// Template is a parsed url_template: a fixed scheme and host, placeholders only in the path.
// Each value is escaped as one path segment, so a value can neither add segments ("/" is
// refused unless the tool allows it), start a query ("?") or fragment ("#"), nor walk up ("."
// and ".." are refused, in every segment).
type Template struct {
	raw   string
	parts []templatePart
	host  string // lower-case host without port
	names []string
}

type templatePart struct {
	literal string
	name    string // set for a placeholder
}

// ParseTemplate checks a url_template: absolute http(s) URL, no userinfo, no query string or
// fragment (query data belongs in query_params), well-formed placeholders that appear only in
// the path.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{raw: s}
	schemeEnd := strings.Index(s, "://")
	if schemeEnd < 0 {
		return nil, errors.New("the URL must be absolute (http:// or https://)")
	}
	pathStart := len(s)
	if i := strings.IndexByte(s[schemeEnd+3:], '/'); i >= 0 {
		pathStart = schemeEnd + 3 + i
	}
	seen := map[string]bool{}
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(s, -1) {
		if m[0] < pathStart {
			return nil, errors.New("placeholders may appear only in the path, not in the scheme or host")
		}
		t.parts = append(t.parts, templatePart{literal: s[last:m[0]]}, templatePart{name: s[m[2]:m[3]]})
		if name := s[m[2]:m[3]]; !seen[name] {
			seen[name] = true
			t.names = append(t.names, name)
		}
		last = m[1]
	}
	t.parts = append(t.parts, templatePart{literal: s[last:]})
	for _, p := range t.parts {
		if p.name == "" && (strings.Contains(p.literal, "{{") || strings.Contains(p.literal, "}}")) {
			return nil, errors.New("a placeholder is malformed: write {{ name }} with a name of letters, digits and '_'")
		}
	}
	probe := placeholderRE.ReplaceAllString(s, "x")
	u, err := CheckURL(probe)
	if err != nil {
		return nil, err
	}
	t.host = normalizeHost(u.Hostname())
	return t, nil
}

// CheckURL parses a fixed target URL and refuses what the http.request action never sends:
// a scheme other than http(s), no host, userinfo, a query string or a fragment.
func CheckURL(s string) (*url.URL, error) {
	if strings.ContainsAny(s, "?#") {
		return nil, errors.New("the URL must not contain a query string or fragment: use query_params")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("the URL does not parse: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("the URL must use http or https")
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return nil, errors.New("the URL must not contain userinfo (credentials belong in credential_refs)")
	}
	if u.Hostname() == "" {
		return nil, errors.New("the URL has no host")
	}
	return u, nil
}

// Host is the template's fixed host, lower-case, without port.
func (t *Template) Host() string { return t.host }

// Names lists the placeholders in order of first appearance.
func (t *Template) Names() []string { return append([]string(nil), t.names...) }

// String is the template as written.
func (t *Template) String() string { return t.raw }

// Expand fills the placeholders from bindings, each value escaped as one path segment. A
// missing, empty, non-scalar, "." or ".." value is refused, and so is a value holding "/".
func (t *Template) Expand(bindings map[string]any) (string, error) { return t.expand(bindings, false) }

// expand is Expand; with slashes a value may hold "/" and then fills several segments, each
// escaped and none empty, "." or "..".
func (t *Template) expand(bindings map[string]any, slashes bool) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.literal)
			continue
		}
		v, ok := bindings[p.name]
		if !ok {
			return "", fmt.Errorf("placeholder {{ %s }} has no value", p.name)
		}
		s, err := scalarString(v)
		if err != nil {
			return "", fmt.Errorf("placeholder {{ %s }}: %w", p.name, err)
		}
		if strings.Contains(s, "/") && !slashes {
			return "", fmt.Errorf("placeholder {{ %s }}: %q holds \"/\", which this tool does not allow in a path value (allow_slash_in_path)", p.name, s)
		}
		for i, seg := range strings.Split(s, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return "", fmt.Errorf("placeholder {{ %s }}: %q is not a valid path segment", p.name, s)
			}
			if i > 0 {
				b.WriteByte('/')
			}
			b.WriteString(url.PathEscape(seg))
		}
	}
	out := b.String()
	u, err := CheckURL(out)
	if err != nil {
		return "", fmt.Errorf("the expanded URL is not valid: %w", err)
	}
	if normalizeHost(u.Hostname()) != t.host {
		return "", errors.New("the expanded URL changed host")
	}
	return out, nil
}

// ExpandText fills placeholders in a query value or a JSON string. The result is raw text: the
// caller's encoder (url.Values.Encode, json.Marshal) escapes it for its place.
func ExpandText(s string, bindings map[string]any) (string, error) {
	var firstErr error
	out := placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		name := placeholderRE.FindStringSubmatch(m)[1]
		v, ok := bindings[name]
		if !ok {
			if firstErr == nil {
				firstErr = fmt.Errorf("placeholder {{ %s }} has no value", name)
			}
			return ""
		}
		str, err := scalarString(v)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("placeholder {{ %s }}: %w", name, err)
		}
		return str
	})
	return out, firstErr
}

// TextNames lists the placeholders of a query value or JSON string.
func TextNames(s string) []string {
	var out []string
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}
