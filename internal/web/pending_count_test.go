package web

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

var titleRe = regexp.MustCompile(`<title>([^<]*)</title>`)

func pageTitle(body string) string {
	m := titleRe.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestPendingCountOnEveryPage: a reviewer's pages carry the number of approvals waiting in
// their inbox on the Inbox link and in the tab title, rendered by the server (no script
// needed), and name the count-only socket; the socket sends the count and then each change. A
// member's pages have neither.
func TestPendingCountOnEveryPage(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		rb := e.browser(rita)

		body := readBody(rb.do("GET", "/conversations", "", nil))
		if got := pageTitle(body); got != "Conversations · Parley" {
			t.Errorf("title with nothing waiting: %q", got)
		}
		if !strings.Contains(body, `data-parley="pending-count" data-count="0" hidden`) || !strings.Contains(body, `data-pending-ws="/inbox/ws?count=1"`) {
			t.Fatalf("the reviewer's page lacks the (hidden) count or its socket:\n%s", body)
		}

		conn, res, err := rb.dial(t, "/inbox/ws?count=1", e.ts.URL)
		if err != nil {
			t.Fatalf("count socket: %v %v", res, err)
		}
		if f := readInboxFrame(t, e, conn); f.Type != "count" || f.Count == nil || *f.Count != 0 || f.HTML != nil {
			t.Fatalf("first count frame = %+v", f)
		}

		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("p1", "publish", map[string]any{"text": "one"}))
		if f := readInboxFrame(t, e, conn); f.Type != "count" || f.Count == nil || *f.Count != 1 {
			t.Fatalf("count after a pending approval = %+v", f)
		}
		body = readBody(rb.do("GET", "/conversations", "", nil))
		if got := pageTitle(body); got != "(1) Conversations · Parley" {
			t.Errorf("title with one waiting: %q", got)
		}
		if !strings.Contains(body, `data-parley="pending-count" data-count="1"><span data-parley="pending-number">1</span>`) {
			t.Fatalf("the Inbox link does not show 1:\n%s", body)
		}

		conv2 := e.conversation(ann)
		e.pending(conv2, ann, llmtest.Call("p2", "publish", map[string]any{"text": "two"}))
		if f := readInboxFrame(t, e, conn); f.Count == nil || *f.Count != 2 {
			t.Fatalf("count after a second = %+v", f)
		}
		if got := pageTitle(readBody(rb.do("GET", "/inbox", "", nil))); got != "(2) Inbox · Parley" {
			t.Errorf("inbox title: %q", got)
		}
		if res := e.script(rita).api("POST", "/api/v1"+resolveURLFor(conv.ID, "p1"), `{"decision":"approve"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("approve: %d %s", res.StatusCode, readBody(res))
		}
		if f := readInboxFrame(t, e, conn); f.Count == nil || *f.Count != 1 {
			t.Fatalf("count after a decision = %+v", f)
		}

		ab := e.browser(ann)
		body = readBody(ab.do("GET", "/conversations", "", nil))
		if strings.Contains(body, "pending-count") || strings.Contains(body, "data-pending-ws") || pageTitle(body) != "Conversations · Parley" {
			t.Fatalf("a member's page shows a pending count:\n%s", body)
		}
		if _, res, err := ab.dial(t, "/inbox/ws?count=1", e.ts.URL); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member's count socket: %v", err)
		}
	})
}
