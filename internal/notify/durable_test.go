package notify

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/sqlitestore"
)

// idReceiver is a real HTTP receiver that verifies each post's Standard Webhooks signature and
// counts the posts of each webhook-id; it answers 503 while down.
type idReceiver struct {
	srv  *httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	ok   map[string]int // webhook-id → posts answered 200
	seen map[string]int // webhook-id → posts
	bad  []error
}

func newIDReceiver(t *testing.T, secret string) *idReceiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &idReceiver{ok: map[string]int{}, seen: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get("webhook-id")
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen[id]++
		var n agent.Notification
		if err := wh.Verify(body, req.Header); err != nil {
			r.bad = append(r.bad, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := json.Unmarshal(body, &n); err != nil || n.Type == "" {
			r.bad = append(r.bad, fmt.Errorf("payload %s: %v", body, err))
		}
		if r.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		r.ok[id]++
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// counts returns copies of the receiver's counts and its verification failures.
func (r *idReceiver) counts() (ok, seen map[string]int, bad []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok, seen = map[string]int{}, map[string]int{}
	for k, v := range r.ok {
		ok[k] = v
	}
	for k, v := range r.seen {
		seen[k] = v
	}
	return ok, seen, append([]error(nil), r.bad...)
}

// eventually polls cond every few milliseconds for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func payload(t *testing.T, i int) []byte {
	t.Helper()
	b, err := json.Marshal(agent.Notification{Type: agent.NotifyRequested, ConversationID: "c", ToolCallID: fmt.Sprintf("call_%d", i), Tool: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDurableDeliverySurvivesRestart: a notification in the outbox is posted to a real receiver;
// while the receiver is down it is retried with backoff and the same webhook-id; the sender
// stops (a restart) with it undelivered, and the next sender on the same store delivers it, with
// that id, once; then the outbox is empty. One that never gets through is given up after
// Attempts and counted.
func TestDurableDeliverySurvivesRestart(t *testing.T) {
	key := []byte("a notification secret")
	rcv := newIDReceiver(t, "whsec_"+base64.StdEncoding.EncodeToString(key))
	path := filepath.Join(t.TempDir(), "parley.db")
	st, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := Config{URL: rcv.srv.URL, Secret: key, Logger: quiet, Store: st, Poll: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, Attempts: 50}

	rcv.down.Store(true)
	if err := st.EnqueueNotify(context.Background(), store.NotifyMessage{ID: "ntf_one", Payload: payload(t, 1)}); err != nil {
		t.Fatal(err)
	}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "two failed attempts", func() bool { _, seen, _ := rcv.counts(); return seen["ntf_one"] >= 2 })
	first.Close() // the restart: the notification is still owed
	_, seenBefore, _ := rcv.counts()

	rcv.down.Store(false)
	second, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	eventually(t, "delivered after the restart", func() bool { ok, _, _ := rcv.counts(); return ok["ntf_one"] == 1 })
	ok, seen, bad := rcv.counts()
	if len(bad) > 0 || len(seen) != 1 || ok["ntf_one"] != 1 || seen["ntf_one"] <= seenBefore["ntf_one"] {
		t.Fatalf("posts %v, delivered %v, refused %v", seen, ok, bad)
	}
	eventually(t, "the outbox emptied", func() bool {
		left, err := st.ClaimNotify(context.Background(), time.Now().Add(time.Hour), time.Millisecond, 10)
		return err == nil && len(left) == 0
	})
	if second.Sent() != 1 {
		t.Fatalf("sent %d", second.Sent())
	}

	// Never delivered: given up after Attempts, counted, removed.
	rcv.down.Store(true)
	third, err := New(Config{URL: rcv.srv.URL, Secret: key, Logger: quiet, Store: st, Poll: 10 * time.Millisecond, RetryBase: time.Millisecond, Attempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	second.Close() // one sender, so the attempts are third's to count
	if err := st.EnqueueNotify(context.Background(), store.NotifyMessage{ID: "ntf_two", Payload: payload(t, 2)}); err != nil {
		t.Fatal(err)
	}
	third.Notify(agent.Notification{}) // the nudge the agent gives after its commit
	eventually(t, "given up after 3 attempts", func() bool { return third.Dropped() == 1 })
	if _, seen, _ := rcv.counts(); seen["ntf_two"] != 3 {
		t.Fatalf("ntf_two was posted %d times, want 3", seen["ntf_two"])
	}
}

// TestDurableDeliveryTwoProcesses: two senders, each on its own handle of one PostgreSQL
// database (two processes), share an outbox of 40 notifications: every one is delivered exactly
// once (SKIP LOCKED and the lease keep them from posting the same row).
func TestDurableDeliveryTwoProcesses(t *testing.T) {
	key := []byte("a notification secret")
	rcv := newIDReceiver(t, "whsec_"+base64.StdEncoding.EncodeToString(key))
	url := pgtest.NewURL(t)
	var senders []*Webhook
	var handles []*pgstore.Store
	for range 2 {
		st, err := pgstore.Open(context.Background(), url, quiet)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, st)
	}
	defer func() {
		for _, w := range senders {
			w.Close()
		}
		for _, st := range handles {
			st.Close()
		}
	}()
	const n = 40
	msgs := make([]store.NotifyMessage, n)
	for i := range msgs {
		msgs[i] = store.NotifyMessage{ID: fmt.Sprintf("ntf_%02d", i), Payload: payload(t, i)}
	}
	if err := handles[0].EnqueueNotify(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	for _, st := range handles {
		w, err := New(Config{URL: rcv.srv.URL, Secret: key, Logger: quiet, Store: st, Poll: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, w)
	}
	eventually(t, "every notification delivered", func() bool { ok, _, _ := rcv.counts(); return len(ok) == n })
	// Nothing is posted after this: both senders stopped, and the receiver finished every post
	// that reached it (Close waits for them). Then no row is left to be posted again.
	for _, w := range senders {
		w.Close()
	}
	rcv.srv.Close()
	if left, err := handles[0].ClaimNotify(context.Background(), time.Now().Add(time.Hour), time.Millisecond, n); err != nil || len(left) != 0 {
		t.Fatalf("the outbox after every notification was delivered: %d rows (%v), which would be posted again", len(left), err)
	}
	ok, seen, bad := rcv.counts()
	if len(bad) > 0 {
		t.Fatalf("refused: %v", bad)
	}
	for id, c := range seen {
		if c != 1 || ok[id] != 1 {
			t.Errorf("%s posted %d times", id, c)
		}
	}
	if senders[0].Sent()+senders[1].Sent() != n {
		t.Fatalf("sent %d + %d, want %d", senders[0].Sent(), senders[1].Sent(), n)
	}
	t.Logf("sender one posted %d, sender two %d", senders[0].Sent(), senders[1].Sent())
}
