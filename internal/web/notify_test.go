package web

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"parley/internal/agent"
	"parley/internal/llm/llmtest"
	"parley/internal/notify"
	"parley/internal/store"
)

// TestApprovalNotifications: with the notification webhook configured, an approval asked for
// and then decided through the API reaches a real HTTP receiver as approval.requested and
// approval.decided, each verified with the Standard Webhooks library.
func TestApprovalNotifications(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		key := []byte("notify secret")
		wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(key))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan agent.Notification, 8)
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := wh.Verify(body, r.Header); err != nil {
				t.Errorf("signature: %v", err)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			var n agent.Notification
			_ = json.Unmarshal(body, &n)
			got <- n
		}))
		defer rcv.Close()
		nf, err := notify.New(notify.Config{URL: rcv.URL, Secret: key, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer nf.Close()
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000}, func(_ *testEnv, cfg *agent.Config) { cfg.Notifier = nf })
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("n1", "note", `{"text":"a"}`))
		next := func() agent.Notification {
			select {
			case n := <-got:
				return n
			case <-time.After(10 * time.Second):
				t.Fatal("no notification")
			}
			return agent.Notification{}
		}
		if n := next(); n.Type != agent.NotifyRequested || n.ConversationID != conv.ID || n.ToolCallID != "n1" || n.Tool != "note" ||
			n.OwnerID != owner.ID || n.ExpiresAt == nil {
			t.Fatalf("requested: %+v", n)
		}
		if res := e.script(owner).api("POST", "/api/v1/conversations/"+conv.ID+"/calls/n1/resolve", `{"decision":"deny","reason":"not now"}`); res.StatusCode != 200 {
			t.Fatalf("deny: %d", res.StatusCode)
		}
		if n := next(); n.Type != agent.NotifyDecided || n.Decision != "deny" || n.By != owner.ID || n.Reason != "not now" {
			t.Fatalf("decided: %+v", n)
		}
	})
}
