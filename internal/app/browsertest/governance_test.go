package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserRememberApproval: ann approves a send_email "and remember" for this conversation
// from the card (over hooks.js's fetch); the next send_email in the conversation runs without
// asking and its card names the remembered approval.
func TestBrowserRememberApproval(t *testing.T) {
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")

	ann.newConversation("Remember")
	ann.say("email bob@example.com about lunch")
	id := ann.newestCallID("send_email", "approval")
	remember := callSel(id) + ` [data-parley="remember"]`
	ann.until(`document.querySelector(` + q(remember+` button[value="remember"]`) + `) !== null`)
	ann.do(chromedp.Click(chromedp.CSS(remember+` input[name="remember_scope"][value="conversation"]`)),
		chromedp.SetValue(chromedp.CSS(remember+` select[name="remember_for"]`), "3600"))
	ann.shot("remember-card")
	ann.do(chromedp.Click(chromedp.CSS(remember + ` button[value="remember"]`)))
	ann.until(callStatusIs(id, "resolved"))
	ann.until(statusIs("idle"))

	ann.say("email carol@example.com about lunch")
	sel := `[data-parley="tool-call"][data-tool="send_email"]`
	ann.until(`document.querySelectorAll(` + q(sel) + `).length === 2`)
	second := eval[string](ann, `Array.from(document.querySelectorAll(`+q(sel)+`)).pop().dataset.toolCallId`)
	if second == id {
		t.Fatal("no second send_email")
	}
	ann.until(callStatusIs(second, "resolved"))
	ann.until(`document.querySelector(` + q(callSel(second)+` [data-parley="grant"]`) + `) !== null`)
	if txt := eval[string](ann, `document.querySelector(`+q(callSel(second)+` [data-parley="grant"]`)+`).innerText`); !containsAll(txt, "Allowed by your remembered approval", "grant_") {
		t.Errorf("the second call's card says %q", txt)
	}
	if eval[bool](ann, `document.querySelector(`+q(callSel(second)+` [data-parley="approval"]`)+`) !== null`) {
		t.Error("the remembered call still asks for an approval")
	}
	ann.shot("remembered-call")
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
