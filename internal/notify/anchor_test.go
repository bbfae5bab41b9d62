package notify

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"parley/internal/store"
)

// TestAnchorSenderPostsSignedHeads: the audit chain's heads reach the webhook signed twice over
// (the webhook's Standard Webhooks signature, the head's own with the audit key), a failed post
// is retried, and a head older than one delivered is not sent.
func TestAnchorSenderPostsSignedHeads(t *testing.T) {
	secret := []byte("a notification secret")
	wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(secret))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan AnchorPayload, 8)
	fail := 1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := wh.Verify(body, req.Header); err != nil {
			t.Errorf("signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if fail > 0 {
			fail--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p AnchorPayload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Error(err)
		}
		got <- p
	}))
	defer srv.Close()
	key, err := store.NewAuditKey([]byte("the audit key, 32 bytes long at least"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAnchorSender(Config{URL: srv.URL, Secret: secret, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	head := key.SignHead(store.AuditHead{Seq: 7, Hash: "abc", Legacy: 0, At: time.Now()})
	a.Anchor(head)
	select {
	case p := <-got:
		if p.Type != AnchorType || p.Anchor.Seq != 7 || key.CheckHead(p.Anchor) != nil {
			t.Fatalf("received %+v", p)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no anchor received")
	}
	a.Anchor(key.SignHead(store.AuditHead{Seq: 6, Hash: "old", At: time.Now()}))
	a.Anchor(key.SignHead(store.AuditHead{Seq: 8, Hash: "def", At: time.Now()}))
	select {
	case p := <-got:
		if p.Anchor.Seq != 8 {
			t.Fatalf("received %+v, want the head at 8", p)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no anchor received")
	}
}
