package tools

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStorableAndBoundedText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
	} {
		if got := StorableText(tc.in); got != tc.want {
			t.Errorf("StorableText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("é", 10) // 20 bytes
	got := BoundedText(long, 8)
	if len(got) > 8 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("BoundedText = %q (%d bytes)", got, len(got))
	}
	if BoundedText("short", 8) != "short" {
		t.Error("a short text was changed")
	}
}
