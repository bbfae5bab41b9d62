package browsertest

import (
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// desktop makes the tab 1280×900 until the test ends.
func desktop(t *testing.T, tb *tab) {
	t.Helper()
	if _, err := chromedp.Call(tb.ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 1280, Height: 900, DeviceScaleFactor: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = chromedp.Call(tb.ctx, emulation.ClearDeviceMetricsOverride, cdp.Empty{}) })
}

// TestBrowserApprovalCardAtAGlance: the approval card reads in one glance at 1280 and 390 px —
// a short summary, then Approve and Deny as its first controls, the rest folded (Edit with the
// arguments, Deny's reason beside its own submit, "Always allow" last) — so the closed card is
// short; a denial typed in the reason and sent with Enter denies; axe finds nothing serious;
// without JavaScript the disclosures open and both forms post.
func TestBrowserApprovalCardAtAGlance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")

	for _, size := range []struct {
		name      string
		set       func(*testing.T, *tab)
		maxHeight float64
	}{
		{"1280", desktop, 300},
		{"390", phone, 540},
	} {
		t.Run(size.name, func(t *testing.T) {
			size.set(t, ann)
			ann.newConversation("Card " + size.name)
			ann.say("email bob@example.com about lunch")
			id := ann.newestCallID("send_email", "approval")
			card := callSel(id) + ` [data-parley="approval"]`
			closed := eval[float64](ann, `document.querySelector(`+q(card)+`).getBoundingClientRect().height`)
			t.Logf("the card is %.0f px tall at %s px before Edit opens", closed, size.name)
			if closed > size.maxHeight {
				t.Errorf("the closed card is %.0f px tall at %s px, want at most %.0f", closed, size.name, size.maxHeight)
			}
			// The first controls a keyboard reaches are Approve, then Deny.
			first := eval[[]string](ann, `Array.from(document.querySelector(`+q(card)+`).querySelectorAll("button, summary, input:not([type=hidden]), select, textarea, a[href]"))
				.filter(e => e.checkVisibility()).slice(0, 2).map(e => e.textContent.trim())`)
			if fmt.Sprint(first) != "[Approve Deny…]" {
				t.Errorf("the card's first controls are %q, want Approve then Deny…", first)
			}
			// Deny's reason is inside Deny's disclosure, beside the Deny that sends it.
			if !eval[bool](ann, `(() => { const r = document.querySelector(`+q(card+` input[name="reason"]`)+`);
				const d = r && r.closest('details[data-parley="deny"]');
				return d !== null && d.querySelector('button[name="decision"][value="deny"]') !== null && !d.open && !r.checkVisibility(); })()`) {
				t.Errorf("the reason is not folded inside Deny's disclosure with its button")
			}
			ann.shot("card-closed-" + size.name)
			ann.checkA11y(t, "approval card "+size.name)

			ann.do(chromedp.Click(chromedp.CSS(card + ` details[data-parley="edit"] > summary`)))
			ann.until(`document.querySelector(` + q(card+` [data-parley="args-form"] input[name="arg.subject"]`) + `).checkVisibility()`)
			opened := eval[float64](ann, `document.querySelector(`+q(card)+`).getBoundingClientRect().height`)
			t.Logf("the card is %.0f px tall at %s px with Edit open", opened, size.name)
			ann.shot("card-edit-" + size.name)
			ann.checkA11y(t, "approval card with Edit open "+size.name)

			// Deny opens its reason; Enter in it denies, with the reason.
			ann.do(chromedp.Click(chromedp.CSS(card+` details[data-parley="deny"] > summary`)),
				chromedp.SendKeys(chromedp.CSS(card+` input[name="reason"]`), "not this week\r"))
			ann.until(callStatusIs(id, "denied"))
			ann.until(`document.querySelector(` + q(callSel(id)) + `).innerText.includes("Reason: not this week")`)
		})
	}

	// Without JavaScript the disclosures still open and each form posts: an edited subject is
	// approved, and a reason sent with Enter denies.
	t.Run("without JavaScript", func(t *testing.T) {
		ann.newConversation("Card without JavaScript")
		ann.say("email bob@example.com about lunch")
		edited := ann.newestCallID("send_email", "approval")
		page := eval[string](ann, `location.href`)
		nojs := ann.another()
		if _, err := chromedp.Call(nojs.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
		card := callSel(edited) + ` [data-parley="approval"]`
		subject := card + ` [data-parley="args-form"] input[name="arg.subject"]`
		nojs.do(chromedp.Navigate(page),
			chromedp.Click(chromedp.CSS(card+` details[data-parley="edit"] > summary`)),
			chromedp.SetValue(chromedp.CSS(subject), "Lunch without scripts"),
			chromedp.Click(chromedp.CSS(card+` button[name="decision"][value="approve"]`)))
		nojs.until(`(() => { const c = document.querySelector(` + q(callSel(edited)) + `); return c !== null && c.dataset.status !== "awaiting" && c.innerText.includes("Lunch without scripts"); })()`)

		ann.newConversation("Deny without JavaScript")
		ann.say("email bob@example.com about lunch")
		denied := ann.newestCallID("send_email", "approval")
		page = eval[string](ann, `location.href`)
		card = callSel(denied) + ` [data-parley="approval"]`
		nojs.do(chromedp.Navigate(page),
			chromedp.Click(chromedp.CSS(card+` details[data-parley="deny"] > summary`)),
			chromedp.SendKeys(chromedp.CSS(card+` input[name="reason"]`), "no scripts, no lunch\r"))
		nojs.until(`(() => { const c = document.querySelector(` + q(callSel(denied)) + `); return c !== null && c.dataset.status === "denied" && c.innerText.includes("Reason: no scripts, no lunch"); })()`)
	})
}
