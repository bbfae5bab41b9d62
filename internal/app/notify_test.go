package app

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestNotificationsAreDurable: with PARLEY_NOTIFY_URL, an approval the demo model asks for is
// queued in the store's outbox with the call and posted, signed, to a real receiver; while the
// receiver refuses, the app retries, and the notification arrives once it answers.
func TestNotificationsAreDurable(t *testing.T) {
	key := []byte("the app's notification key")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan map[string]any, 8)
	refuse := make(chan struct{}, 1)
	refuse <- struct{}{} // the first post is refused
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := wh.Verify(body, r.Header); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		select {
		case <-refuse:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		default:
		}
		var n map[string]any
		if json.Unmarshal(body, &n) == nil {
			n["webhook-id"] = r.Header.Get("webhook-id")
			got <- n
		}
	}))
	defer rcv.Close()
	a := startIn(t, "", t.TempDir(), true, map[string]string{"PARLEY_NOTIFY_URL": rcv.URL, "PARLEY_NOTIFY_SECRET": secret})
	_, body := a.call(t, "POST", "/api/v1/conversations", `{"title":"notified"}`)
	conv := body["id"].(string)
	if status, body := a.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"email bob@example.com about lunch"}`); status != 202 {
		t.Fatalf("message: %d %v", status, body)
	}
	select {
	case n := <-got:
		if n["type"] != "approval.requested" || n["conversation_id"] != conv || n["tool"] != "send_email" {
			t.Fatalf("received %v", n)
		}
	case <-time.After(20 * time.Second): // the refused post is retried after the backoff (2 s)
		t.Fatal("no notification arrived")
	}
}
