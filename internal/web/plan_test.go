package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestPlanPreview: the approval card's plan for edited arguments. The page route takes the
// card's own form (fields or JSON) with the session's CSRF token and answers the card's plan
// fragment; the API route takes {"arguments"} and answers {"plan"}. Both answer only someone who
// may decide the call (others get Resolve's not_found or permission_denied), refuse arguments
// the schema refuses with 422 and problems, spend the previews budget, and write nothing.
func TestPlanPreview(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{PreviewBurst: 12, PreviewsPerMinute: 1})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("c1", "send_email", emailArgs("bob@example.com")),
			llmtest.Call("p1", "publish", map[string]any{"text": "hello"}))
		before := e.view(conv.ID).LastSeq
		page := func(call string) string { return "/conversations/" + conv.ID + "/calls/" + call + "/plan" }
		api := func(call string) string { return "/api/v1/conversations/" + conv.ID + "/calls/" + call + "/plan" }
		fields := func(to string) url.Values {
			return url.Values{"decision": {"approve"}, "args_form": {"1"}, "arg.to": {to}, "arg.subject": {"lunch"}, "arg.body": {"Noon."}}
		}
		summary := func(body string) string {
			doc := viewstest.MustParse(body)
			el, n := doc.One(`div[data-parley="plan"] p[class="plan-summary"]`)
			if n != 1 {
				t.Fatalf("no plan in the fragment: %.300s", body)
			}
			return viewstest.Text(el)
		}

		// The owner's browser, the card's fields: the plan of the edit, as the card shows it.
		b := e.browser(ann)
		res := b.postForm(page("c1"), fields("carol@example.com"), b.csrf)
		body := readBody(res)
		if res.StatusCode != http.StatusOK || !strings.Contains(summary(body), "carol@example.com") {
			t.Fatalf("preview = %d %.300s", res.StatusCode, body)
		}
		// The arguments as JSON (the card's text area).
		res = b.postForm(page("c1"), url.Values{"decision": {"approve"}, "args": {`{"to":"dave@example.com","subject":"s","body":"b"}`}}, b.csrf)
		if body := readBody(res); res.StatusCode != http.StatusOK || !strings.Contains(summary(body), "dave@example.com") {
			t.Fatalf("preview of JSON = %d %.300s", res.StatusCode, body)
		}
		// Without the CSRF token: refused.
		if res := b.postForm(page("c1"), fields("carol@example.com"), ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("preview without CSRF = %d", res.StatusCode)
		}
		// A value the schema refuses: 422 with the problem at its field.
		v := fields("not an address")
		v.Set("_csrf", b.csrf)
		res = b.do("POST", page("c1"), "application/x-www-form-urlencoded", strings.NewReader(v.Encode()), "Accept", "text/html, application/json")
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("invalid preview = %d %s", res.StatusCode, readBody(res))
		}
		if eb := decodeEnvelope(t, res); eb.Error.Kind != "invalid_args" || !strings.Contains(jsonText(eb.Error.Details["problems"]), `"/to"`) {
			t.Fatalf("invalid preview: %+v", eb.Error)
		}
		// Someone who may not decide the call.
		if bb := e.browser(bob); bb.postForm(page("c1"), fields("carol@example.com"), bb.csrf).StatusCode != http.StatusNotFound {
			t.Fatal("a stranger's preview is not 404")
		}
		rb := e.browser(rita)
		if res := rb.postForm(page("c1"), fields("carol@example.com"), rb.csrf); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a reviewer's preview of the owner's call = %d", res.StatusCode)
		}
		if res := rb.postForm(page("p1"), url.Values{"args": {`{"text":"bye"}`}}, rb.csrf); res.StatusCode != http.StatusOK {
			t.Fatalf("a reviewer's preview of a reviewer's call = %d %s", res.StatusCode, readBody(res))
		}

		// The API.
		s := e.script(ann)
		res = s.api("POST", api("c1"), `{"arguments":{"to":"erin@example.com","subject":"s","body":"b"}}`)
		var got struct {
			Plan struct {
				Summary string         `json:"summary"`
				Details map[string]any `json:"details"`
			} `json:"plan"`
		}
		if body := readBody(res); res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || !strings.Contains(got.Plan.Summary, "erin@example.com") {
			t.Fatalf("API preview = %d %s", res.StatusCode, body)
		}
		res = s.api("POST", api("c1"), `{"arguments":{"to":"nope"}}`)
		if eb := decodeEnvelope(t, res); res.StatusCode != http.StatusUnprocessableEntity || eb.Error.Details["problems"] == nil {
			t.Fatalf("API preview of invalid args = %d %+v", res.StatusCode, eb.Error)
		}
		if res := s.api("POST", api("p1"), `{"arguments":{"text":"x"}}`); res.StatusCode != http.StatusForbidden || decodeEnvelope(t, res).Error.Kind != "permission_denied" {
			t.Fatalf("the owner's API preview of a reviewer's call = %d", res.StatusCode)
		}
		if res := e.script(bob).api("POST", api("c1"), `{}`); res.StatusCode != http.StatusNotFound {
			t.Fatalf("a stranger's API preview = %d", res.StatusCode)
		}
		if res := s.api("POST", api("c1"), `{"args":{}}`); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("an unknown field = %d", res.StatusCode)
		}

		// Nothing was written.
		if after := e.view(conv.ID).LastSeq; after != before {
			t.Fatalf("the log moved from %d to %d", before, after)
		}
		if c := e.call(conv.ID, "c1"); c.Status != store.CallAwaiting || !strings.Contains(c.Plan.Summary, "bob@example.com") {
			t.Fatalf("c1 after the previews: %s %+v", c.Status, c.Plan)
		}

		// The previews budget (12, hardly refilled) runs out for ann: 429 with Retry-After.
		var last *http.Response
		for range 12 {
			if last != nil {
				readBody(last)
			}
			last = b.postForm(page("c1"), fields("carol@example.com"), b.csrf)
			if last.StatusCode == http.StatusTooManyRequests {
				break
			}
		}
		if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
			t.Fatalf("past the previews budget = %d", last.StatusCode)
		}
		readBody(last)
		// The page budget is untouched: the decision still goes through.
		if res := b.postForm("/conversations/"+conv.ID+"/calls/c1/resolve", url.Values{"decision": {"deny"}}, b.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("deny after the previews = %d", res.StatusCode)
		}
	})
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
