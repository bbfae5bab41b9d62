package notify

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/store"
)

// oneShotOutbox hands out one notification (about to be given up after a failed post) and
// records the errors stored with retries.
type oneShotOutbox struct {
	mu      sync.Mutex
	given   bool
	done    chan struct{}
	lastErr []string
}

func (o *oneShotOutbox) ClaimNotify(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.NotifyMessage, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.given {
		return nil, nil
	}
	o.given = true
	return []store.NotifyMessage{{ID: "ntf_1", Payload: []byte(`{"type":"approval.requested"}`), Attempts: 1}}, nil
}
func (o *oneShotOutbox) CompleteNotify(ctx context.Context, id string) error { return nil }
func (o *oneShotOutbox) ReleaseNotify(ctx context.Context, id string) error  { return nil }
func (o *oneShotOutbox) RetryNotify(ctx context.Context, id string, next time.Time, lastError string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastErr = append(o.lastErr, lastError)
	close(o.done)
	return nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestFailedPostKeepsTheURLSecret: a relay's URL may carry its secret in the path or the query;
// a post that fails (nothing listens) logs and stores what went wrong without the URL.
func TestFailedPostKeepsTheURLSecret(t *testing.T) {
	var logs lockedBuffer
	ob := &oneShotOutbox{done: make(chan struct{})}
	w, err := New(Config{URL: "http://127.0.0.1:1/services/T0/B0/SECRETPATH?token=SECRETTOKEN", Secret: []byte("0123456789abcdef0123456789abcdef"),
		Store: ob, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Poll: 10 * time.Millisecond, Attempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ob.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no retry was scheduled")
	}
	w.Close()
	logs.mu.Lock()
	defer logs.mu.Unlock()
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for _, s := range append([]string{logs.b.String()}, ob.lastErr...) {
		if strings.Contains(s, "SECRET") {
			t.Fatalf("the notification URL's secret leaked: %s", s)
		}
	}
	if len(ob.lastErr) != 1 || !strings.Contains(ob.lastErr[0], "refused") {
		t.Fatalf("stored errors = %q, want what went wrong", ob.lastErr)
	}
}
