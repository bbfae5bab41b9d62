package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestStopAndQueueOverTheAPI: Stopping and moving on (docs/api.md, "Messages and turns") through the JSON API and the
// page's Stop form.
func TestStopAndQueueOverTheAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		api := e.script(ann)

		// A stop while a call awaits: 200, the call cancelled, the conversation idle; again: 409.
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "send_email", emailArgs("bob@example.com")))
		stop := "/api/v1/conversations/" + conv.ID + "/cancel"
		if res := api.api("POST", stop, ""); res.StatusCode != http.StatusOK || readBody(res) != `{"ok":true}`+"\n" {
			t.Fatalf("stop = %d", res.StatusCode)
		}
		v := e.awaitStatus(conv.ID, store.StatusIdle)
		if c := e.call(conv.ID, "gate"); c.Status != store.CallCancelled {
			t.Fatalf("call after the stop: %+v (view %s)", c, v.Status)
		}
		res := api.api("POST", stop, "")
		if res.StatusCode != http.StatusConflict || decodeEnvelope(t, res).Error.Kind != fault.KindStale {
			t.Fatalf("a stop with nothing running = %d", res.StatusCode)
		}

		// A message while the model writes is queued (202 queued), then runs.
		release := make(chan struct{})
		e.model.Push(llmtest.Step{Deltas: []string{"Working"}, Release: release}, llmtest.Reply("Queued one answered."))
		msgs := "/api/v1/conversations/" + conv.ID + "/messages"
		if res := api.api("POST", msgs, `{"text":"first"}`); res.StatusCode != http.StatusAccepted {
			t.Fatalf("first = %d", res.StatusCode)
		}
		e.awaitStatus(conv.ID, store.StatusGenerating)
		res = api.api("POST", msgs, `{"text":"second"}`)
		var got map[string]any
		if err := json.Unmarshal([]byte(readBody(res)), &got); err != nil || res.StatusCode != http.StatusAccepted || got["queued"] != true {
			t.Fatalf("second = %d %v %v", res.StatusCode, got, err)
		}
		close(release)
		e.await(conv.ID, "the queued message answered", func(v agent.View) bool {
			return v.Status == store.StatusIdle && len(v.Messages) > 0 && v.Messages[len(v.Messages)-1].Content == "Queued one answered."
		})

		// The page's Stop is a plain form POST too.
		e.pending(conv, ann, llmtest.Call("gate2", "send_email", emailArgs("bob@example.com")))
		b := e.browser(ann)
		res = b.postForm("/conversations/"+conv.ID+"/cancel", url.Values{}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations/"+conv.ID {
			t.Fatalf("stop form = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if c := e.call(conv.ID, "gate2"); c.Status != store.CallCancelled {
			t.Fatalf("call after the page's stop: %+v", c)
		}
		res = b.postForm("/conversations/"+conv.ID+"/cancel", url.Values{}, b.csrf)
		if loc := res.Header.Get("Location"); loc != "/conversations/"+conv.ID+"?notice=nothing" {
			t.Fatalf("a second stop form redirects to %q", loc)
		}
	})
}
