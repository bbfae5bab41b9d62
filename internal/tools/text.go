package tools

import (
	"strings"
	"unicode/utf8"
)

// StorableText returns s as text every store keeps: valid UTF-8 without NUL bytes (each invalid
// sequence and each NUL becomes U+FFFD). Text a model, a tool or an MCP server produced goes
// through it before it is stored (the rule lives here, once).
func StorableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// BoundedText is StorableText(s) cut to at most n bytes on a rune boundary, ending with "…"
// when cut.
func BoundedText(s string, n int) string {
	s = StorableText(s)
	if len(s) <= n {
		return s
	}
	return CutRunes(s, n-len("…")) + "…"
}

// CutRunes is s cut to at most n bytes without splitting a UTF-8 sequence (s whole when it fits;
// "" when n <= 0).
func CutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
