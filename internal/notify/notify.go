// Package notify sends the approval notifications of the agent (agent.Notifier) to the
// operator's webhook (PARLEY_NOTIFY_URL): a JSON POST signed like a webhook tool, with the
// Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature) keyed by
// PARLEY_NOTIFY_SECRET, so a Slack or Teams relay can verify it with any Standard Webhooks
// library.
//
// Delivery is best effort and never slows a conversation: Notify queues (bounded: Queue) and
// one sender posts in order, retrying a failed post a few times with backoff; when the queue
// is full a notification is dropped, counted (Dropped) and logged. What is durable is the audit
// trail; a notification is a nudge.
package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/tools/webhook"
)

// Config configures a Webhook.
type Config struct {
	URL    string
	Secret []byte // decoded (webhook.DecodeSecret)
	// Production refuses a plain-HTTP URL.
	Production bool
	Client     *http.Client // nil: a client with a 10 s timeout
	Clock      clock.Clock  // nil: the wall clock
	Logger     *slog.Logger // nil: slog.Default()
	// Queue bounds the notifications waiting to be sent (default 256); Attempts bounds the
	// posts of one (default 3).
	Queue    int
	Attempts int
}

// Webhook posts notifications to one URL.
type Webhook struct {
	cfg     Config
	queue   chan agent.Notification
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64
	sent    atomic.Int64
}

var _ agent.Notifier = (*Webhook)(nil)

// New checks cfg and starts the sender; Close stops it.
func New(cfg Config) (*Webhook, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("PARLEY_NOTIFY_URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Production && u.Scheme != "https" {
		return nil, errors.New("PARLEY_NOTIFY_URL must be https in production")
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("PARLEY_NOTIFY_SECRET is required with PARLEY_NOTIFY_URL: notifications are signed")
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 256
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 3
	}
	w := &Webhook{cfg: cfg, queue: make(chan agent.Notification, cfg.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w, nil
}

// Notify queues n; it never blocks (a full queue drops n).
func (w *Webhook) Notify(n agent.Notification) {
	select {
	case w.queue <- n:
	default:
		w.dropped.Add(1)
		w.cfg.Logger.Warn("notification dropped: the queue is full", "type", n.Type, "tool_call_id", n.ToolCallID)
	}
}

// Dropped and Sent count notifications dropped at a full queue and delivered.
func (w *Webhook) Dropped() int64 { return w.dropped.Load() }

// Sent counts notifications delivered (a 2xx answer).
func (w *Webhook) Sent() int64 { return w.sent.Load() }

// Close stops the sender after the post in flight; what is still queued is dropped. It is
// safe to call more than once.
func (w *Webhook) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Webhook) run() {
	defer close(w.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-w.stop
		cancel()
	}()
	for {
		select {
		case <-w.stop:
			return
		case n := <-w.queue:
			w.deliver(ctx, n)
		}
	}
}

// deliver posts n, retrying a failure with a growing pause; the same webhook-id on every
// attempt lets the receiver drop a repeat.
func (w *Webhook) deliver(ctx context.Context, n agent.Notification) {
	id := "ntf_" + randomHex(12)
	body, err := json.Marshal(n)
	if err != nil {
		w.cfg.Logger.Error("encode a notification", "err", err)
		return
	}
	pause := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := w.post(ctx, id, body)
		if err == nil {
			w.sent.Add(1)
			return
		}
		if attempt >= w.cfg.Attempts || ctx.Err() != nil {
			w.cfg.Logger.Warn("notification not delivered", "type", n.Type, "tool_call_id", n.ToolCallID, "attempts", attempt, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.cfg.Clock.After(pause):
		}
		pause *= 2
	}
}

func (w *Webhook) post(ctx context.Context, id string, body []byte) error {
	ts := w.cfg.Clock.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, fmt.Sprint(ts.Unix()))
	req.Header.Set(webhook.HeaderSignatureV1, webhook.SignStandard(w.cfg.Secret, id, ts, body))
	req.Header.Set("X-Webhook-Signature", webhook.SignHMAC(w.cfg.Secret, ts, body))
	res, err := w.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", res.Status)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
