package agent

import (
	"testing"

	"parley/internal/tools"
)

// TestURLQuestionLinksThatMisleadAreRefused: a link whose text would read as another address
// (a right-to-left override, a zero-width joiner, a space) or that is not http(s) with a valid
// host is refused; look-alike letters are allowed (the card shows the host in punycode).
func TestURLQuestionLinksThatMisleadAreRefused(t *testing.T) {
	for _, u := range []string{"https://\u202emoc.elppa.evil/", "https://exa\u200dmple.com/", "https://example.com/a b",
		"javascript:alert(1)", "https://user:pw@example.com/", "https:///nohost", "https://exa\x00mple.com/"} {
		if _, err := promptOf("t", tools.Question{Message: "sign in", URL: u}); err == nil {
			t.Errorf("URL question %q accepted", u)
		}
	}
	for _, u := range []string{"https://example.com/authorize?x=1", "http://127.0.0.1:8080/cb", "https://аррle.com/login"} {
		if _, err := promptOf("t", tools.Question{Message: "sign in", URL: u}); err != nil {
			t.Errorf("URL question %q refused: %v", u, err)
		}
	}
}
