package browsertest

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// rememberApproval: ann approves a send_email "and remember" for this conversation, for any
// arguments (send_email has no rules here), from the card (over hooks.js's fetch); the next
// send_email in the conversation, to someone else, runs without asking and its card names the
// remembered approval. A step of TestBrowserGovernance.
func rememberApproval(t *testing.T, h *harness, ann *tab) {

	ann.newConversation("Remember")
	ann.say("email bob@example.com about lunch")
	id := ann.newestCallID("send_email", "approval")
	remember := callSel(id) + ` [data-parley="remember"]`
	ann.until(`document.querySelector(` + q(remember+` button[value="remember"]`) + `) !== null`)
	ann.do(chromedp.Click(chromedp.CSS(callSel(id)+` details[data-parley="always"] > summary`)),
		chromedp.Click(chromedp.CSS(remember+` input[name="remember_scope"][value="conversation"]`)),
		chromedp.Click(chromedp.CSS(remember+` input[name="remember_args"][value="any"]`)),
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

// pendingCount: a reviewer's open page counts the approvals waiting in their inbox on the Inbox
// link and in the tab title, live: up when a call asks, down when it is decided; the inbox page
// keeps it from its own list. A step of TestBrowserGovernance, run while nothing waits.
func pendingCount(t *testing.T, h *harness, rita *tab) {
	rita.do(chromedp.Navigate(h.url + "/conversations"))
	rita.until(`document.documentElement.dataset.parleyPending === "open"`)
	countIs := func(n string) string {
		return `(() => { const c = document.querySelector('[data-parley="pending-count"]'); return c !== null && c.dataset.count === ` + q(n) + ` && c.hidden === (` + q(n) + ` === "0"); })()`
	}
	rita.until(countIs("0"))
	if title := eval[string](rita, `document.title`); title != "Conversations · Parley" {
		t.Fatalf("title with nothing waiting: %q", title)
	}

	chat := rita.another()
	chat.newConversation("Counted")
	chat.say("email gina@example.com about the count")
	id := chat.newestCallID("send_email", "approval")
	rita.until(countIs("1"))
	rita.until(`document.title === "(1) Conversations · Parley"`)
	if txt := eval[string](rita, `document.querySelector('[data-parley="inbox-link"]').innerText`); !strings.Contains(txt, "1") {
		t.Errorf("the Inbox link says %q", txt)
	}
	rita.shot("pending-count")

	inbox := rita.another()
	inbox.do(chromedp.Navigate(h.url + "/inbox"))
	inbox.until(`document.documentElement.dataset.parleySocket === "open"`)
	inbox.until(`document.title === "(1) Inbox · Parley"`)

	chat.do(chromedp.Click(chromedp.CSS(callSel(id) + ` button[name="decision"][value="approve"]`)))
	chat.until(callStatusIs(id, "resolved"))
	rita.until(countIs("0"))
	rita.until(`document.title === "Conversations · Parley"`)
	inbox.until(`document.title === "Inbox · Parley"`)
	inbox.until(countIs("0"))
}
