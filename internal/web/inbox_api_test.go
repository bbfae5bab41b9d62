package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestApprovalsAPIFilters: GET /api/v1/approvals takes the inbox page's filters — tool,
// requester (names matched whole, ignoring case) and age (waiting at least that long) — with
// the page's rule, and refuses a malformed one with 422 invalid_args naming the parameter.
func TestApprovalsAPIFilters(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000})
		ann := e.user("ann", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		a, b := e.conversation(ann), e.conversation(bob)
		e.pending(a, ann, llmtest.Call("a1", "publish", map[string]any{"text": "one"}))
		e.aclk.Advance(6 * time.Minute)
		e.pending(b, bob, llmtest.Call("b1", "publish", map[string]any{"text": "two"}))
		api, rb := e.script(rita), e.browser(rita)
		for _, tc := range []struct {
			query string
			want  string
		}{
			{"", "b1,a1"},
			{"?tool=publish", "b1,a1"},
			{"?tool=PUBLISH", "b1,a1"},
			{"?tool=note", ""},
			{"?tool=pub", ""},
			{"?requester=BOB", "b1"},
			{"?requester=ann&tool=publish", "a1"},
			{"?requester=nobody", ""},
			{"?age=5m", "a1"},
			{"?age=1h", ""},
			{"?age=5m&requester=bob", ""},
		} {
			res := api.api("GET", "/api/v1/approvals"+tc.query, "")
			var body struct {
				Approvals []approvalJSON `json:"approvals"`
			}
			if err := json.Unmarshal([]byte(readBody(res)), &body); res.StatusCode != http.StatusOK || err != nil {
				t.Fatalf("approvals%s = %d %v", tc.query, res.StatusCode, err)
			}
			got := make([]string, len(body.Approvals))
			for i, p := range body.Approvals {
				got[i] = p.ToolCallID
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("approvals%s = %v, want %q", tc.query, got, tc.want)
			}
			// The page lists the same: one rule.
			if page := strings.Join(inboxCallIDs(t, readBody(rb.do("GET", "/inbox"+tc.query, "", nil))), ","); page != tc.want {
				t.Errorf("/inbox%s lists %q, the API %q", tc.query, page, tc.want)
			}
		}
		for _, tc := range []struct{ query, path string }{
			{"?age=soon", "/age"},
			{"?age=-5m", "/age"},
			{"?age=0s", "/age"},
			{"?age=9000h", "/age"},
			{"?tool=" + strings.Repeat("x", 201), "/tool"},
			{"?requester=a%00b", "/requester"},
			{"?requester=a%0Ab", "/requester"},
			{"?tool=%FF", "/tool"},
		} {
			res := api.api("GET", "/api/v1/approvals"+tc.query, "")
			eb := decodeEnvelope(t, res)
			if res.StatusCode != http.StatusUnprocessableEntity || eb.Error.Kind != fault.KindInvalidArgs || !strings.Contains(fmt.Sprint(eb.Error.Details["problems"]), tc.path) {
				t.Errorf("approvals%.40s = %d %+v, want 422 invalid_args at %s", tc.query, res.StatusCode, eb.Error, tc.path)
			}
		}
	})
}
