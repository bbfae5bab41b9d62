package browsertest

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// statusIs is a predicate: the conversation's status line says status.
func statusIs(status string) string {
	return `document.querySelector('[data-parley="status"]').dataset.status === ` + q(status)
}

// statusTextHas is a predicate: the status line's words contain text.
func statusTextHas(text string) string {
	return `document.querySelector('[data-parley="status-text"]').textContent.includes(` + q(text) + `)`
}

const stopButton = `form[data-parley="stop"] button[type="submit"]`

// TestBrowserStopAndMoveOn drives stopping and moving on (docs/api.md, "Messages and turns") through the page: the Stop
// button while a tool runs and while a call awaits the person, a message while a question
// waits (it moves on), and a message while a tool runs (it is queued, then answered).
func TestBrowserStopAndMoveOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	defer h.checkConsole()
	ann := h.browserFor("ann")

	t.Run("stop while a tool runs", func(t *testing.T) {
		ann.newConversation("Stop a countdown")
		ann.say("count down from 10")
		sel := `[data-parley="tool-call"][data-tool="count_down"]`
		ann.until(`document.querySelector(` + q(sel+`[data-status="running"] [data-parley="progress"] li`) + `) !== null`)
		ann.until(statusTextHas("Running tools"))
		ann.shot("stop-while-running")
		ann.do(chromedp.Click(chromedp.CSS(stopButton)))
		ann.until(`document.querySelector(` + q(sel) + `).dataset.status === "cancelled"`)
		ann.until(statusIs("idle"))
		if eval[bool](ann, `document.querySelector(`+q(stopButton)+`) !== null`) {
			t.Errorf("the Stop button stays after the turn ended")
		}
		if txt := eval[string](ann, `document.querySelector('[data-parley="status-text"]').textContent`); txt != "" {
			t.Errorf("the status line still says %q after the turn ended", txt)
		}
		ann.until(`document.querySelector('[data-parley="message"][data-role="stopped"]') !== null`)
		ann.shot("stopped")
	})

	t.Run("stop while an approval waits", func(t *testing.T) {
		ann.newConversation("Stop an approval")
		ann.say("email bob@example.com about lunch")
		id := ann.newestCallID("send_email", "approval")
		ann.until(statusTextHas("Waiting for your answer"))
		ann.do(chromedp.Click(chromedp.CSS(stopButton)))
		ann.until(callStatusIs(id, "cancelled"))
		ann.until(statusIs("idle"))
		if eval[int](ann, `document.querySelectorAll(`+q(callSel(id)+` button[name="decision"]`)+`).length`) != 0 {
			t.Errorf("the stopped approval still offers its buttons")
		}
	})

	t.Run("a message while a question waits moves on", func(t *testing.T) {
		ann.newConversation("Move on")
		ann.say("ask me a few questions")
		id := ann.newestCallID("ask_user", "elicitation")
		ann.say("what time is it")
		ann.until(callStatusIs(id, "cancelled"))
		ann.until(`(() => { const c = document.querySelector('[data-parley="tool-call"][data-tool="get_current_time"]'); return c !== null && c.dataset.status === "resolved"; })()`)
		ann.until(statusIs("idle"))
		ann.shot("moved-on")
	})

	t.Run("a message while a tool runs is queued, then answered", func(t *testing.T) {
		ann.newConversation("Queue")
		ann.say("count down from 3")
		sel := `[data-parley="tool-call"][data-tool="count_down"]`
		ann.until(`document.querySelector(` + q(sel+`[data-status="running"]`) + `) !== null`)
		ann.say("what time is it")
		ann.until(`document.querySelector('[data-parley="queued"] [data-role="user"]') !== null`)
		ann.shot("queued-message")
		ann.until(`(() => { const c = document.querySelector('[data-parley="tool-call"][data-tool="get_current_time"]'); return c !== null && c.dataset.status === "resolved"; })()`)
		ann.until(statusIs("idle"))
		if eval[bool](ann, `document.querySelector('[data-parley="queued"]') !== null`) {
			t.Errorf("the queue still shows after its message ran")
		}
		if got := eval[string](ann, `document.querySelector(`+q(sel)+`).dataset.status`); got != "resolved" {
			t.Errorf("the countdown that ran while the message waited ended %q", got)
		}
	})
}
