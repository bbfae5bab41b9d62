package notify

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"

	"parley/internal/agent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Receiver is a real HTTP receiver that verifies each notification with the Standard Webhooks
// library and hands over what it verified.
type Receiver struct {
	Srv  *httptest.Server
	Got  chan agent.Notification
	Bad  chan error
	fail int // answer 500 to this many posts first
}

// NewReceiver starts a receiver for secret (whsec_…).
func NewReceiver(t *testing.T, secret string, fail int) *Receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Got: make(chan agent.Notification, 16), Bad: make(chan error, 16), fail: fail}
	r.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := wh.Verify(body, req.Header); err != nil {
			r.Bad <- err
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.fail > 0 {
			r.fail--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var n agent.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			r.Bad <- err
			return
		}
		r.Got <- n
	}))
	t.Cleanup(r.Srv.Close)
	return r
}

func TestNotificationsAreSignedAndReceived(t *testing.T) {
	key := []byte("a notification secret")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	rcv := NewReceiver(t, secret, 1) // the first post fails: it is retried with the same id
	w, err := New(Config{URL: rcv.Srv.URL, Secret: key, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	w.Notify(agent.Notification{Type: agent.NotifyRequested, ConversationID: "c", ToolCallID: "x", Tool: "pay", ApprovalsNeeded: 2, At: at})
	select {
	case n := <-rcv.Got:
		if n.Type != agent.NotifyRequested || n.ToolCallID != "x" || n.Tool != "pay" || n.ApprovalsNeeded != 2 || !n.At.Equal(at) {
			t.Fatalf("received %+v", n)
		}
	case err := <-rcv.Bad:
		t.Fatalf("the receiver refused the signature: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
	}
	for deadline := time.Now().Add(10 * time.Second); w.Sent() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) { // the 200 reaches the sender after the handler returned
			t.Fatalf("sent %d", w.Sent())
		}
	}

	// A receiver with another secret refuses it: the signature is real.
	other := NewReceiver(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another")), 0)
	w2, err := New(Config{URL: other.Srv.URL, Secret: key, Attempts: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	w2.Notify(agent.Notification{Type: agent.NotifyDecided})
	select {
	case <-other.Bad:
	case <-time.After(10 * time.Second):
		t.Fatal("the wrong key was not refused")
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, c := range []Config{
		{URL: "ftp://x.example.test", Secret: []byte("k")},
		{URL: "http://x.example.test", Secret: []byte("k"), Production: true},
		{URL: "https://x.example.test"},
	} {
		if w, err := New(c); err == nil {
			w.Close()
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

func TestFullQueueDrops(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	w, err := New(Config{URL: srv.URL, Secret: []byte("k"), Queue: 1, Attempts: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 5 {
		w.Notify(agent.Notification{Type: agent.NotifyRequested})
	}
	if w.Dropped() < 3 {
		t.Fatalf("dropped %d of 5 with a queue of 1 and one in flight", w.Dropped())
	}
}

// A notification is posted to the URL set and nowhere else: a redirect is not followed (the
// signature headers would go with it) but counted as a failed delivery, and retried; the
// environment's proxy is not used.
func TestRedirectsAreNotFollowed(t *testing.T) {
	second := make(chan *http.Request, 16)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { second <- r }))
	defer target.Close()
	posts := make(chan struct{}, 16)
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts <- struct{}{}
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer first.Close()
	w, err := New(Config{URL: first.URL, Secret: []byte("k"), Attempts: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.Notify(agent.Notification{Type: agent.NotifyRequested, ToolCallID: "x"})
	for i := range 2 { // both attempts reach the first server: the 307 was a failure
		select {
		case <-posts:
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d never reached the notification URL", i+1)
		}
	}
	w.Close()
	select {
	case r := <-second:
		t.Fatalf("the redirect was followed: %s %s with webhook-signature %q", r.Method, r.URL, r.Header.Get("webhook-signature"))
	default:
	}
	if w.Sent() != 0 {
		t.Fatalf("sent %d: a 3xx is not a delivery", w.Sent())
	}
	tr, ok := w.cfg.Client.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Fatal("the notification client uses a proxy from the environment")
	}
}
