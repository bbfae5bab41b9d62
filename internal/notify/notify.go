// Package notify sends the approval notifications of the agent (agent.Notifier) to the
// operator's webhook (PARLEY_NOTIFY_URL): a JSON POST signed like a webhook tool, with the
// Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature) keyed by
// PARLEY_NOTIFY_SECRET, so a Slack or Teams relay can verify it with any Standard Webhooks
// library.
//
// Delivery never slows a conversation. With a Store (the app's choice whenever the URL is set)
// it is durable: the agent queues each notification in the store's outbox in the transaction of
// the change it announces (agent.Config.NotifyOutbox); one sender per process claims due rows
// with a lease (SKIP LOCKED on PostgreSQL), so with several processes each is posted by one at
// a time; a failed post is retried with exponential backoff up to Attempts times, with the same
// webhook-id (Standard Webhooks is at-least-once: a receiver drops a repeated id); what was not
// delivered when a process stops is delivered by whichever process runs next. Notify only wakes
// the sender; it also polls (Poll) for rows other processes queued.
//
// Without a Store (tests, tools) Notify queues in memory (bounded: Queue) and one sender posts
// in order, retrying a few times; when the queue is full a notification is dropped, counted
// (Dropped) and logged.
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
	"parley/internal/store"
	"parley/internal/tools/webhook"
)

// Config configures a Webhook.
type Config struct {
	URL    string
	Secret []byte // decoded (webhook.DecodeSecret)
	// Production refuses a plain-HTTP URL.
	Production bool
	// Client posts the notifications; nil is NewClient(). A client given here should not
	// follow redirects (post reads a 3xx as a failed delivery only if it is returned).
	Client *http.Client
	Clock  clock.Clock  // nil: the wall clock
	Logger *slog.Logger // nil: slog.Default()
	// Queue bounds the notifications waiting to be sent in memory (default 256); Attempts
	// bounds the posts of one (default 3 in memory, 8 with a Store).
	Queue    int
	Attempts int
	// Store, when set, makes delivery durable (the package comment): notifications are its
	// outbox's rows. Poll is how often the outbox is read when nothing woke the sender (default
	// 1 s); Lease how long a claimed row is hidden from other senders (default 2 min: longer
	// than a claim's posts take, ClaimBatch times the client's timeout); RetryBase and RetryMax
	// shape the backoff between attempts (defaults 2 s and 5 min).
	Store     Outbox
	Poll      time.Duration
	Lease     time.Duration
	RetryBase time.Duration
	RetryMax  time.Duration
}

// Outbox is the store's notification outbox, as the durable sender uses it (store.Store has it).
type Outbox interface {
	ClaimNotify(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.NotifyMessage, error)
	CompleteNotify(ctx context.Context, id string) error
	RetryNotify(ctx context.Context, id string, next time.Time, lastError string) error
	ReleaseNotify(ctx context.Context, id string) error
}

// ClaimBatch is how many due notifications a durable sender claims at once.
const ClaimBatch = 8

// Webhook posts notifications to one URL.
type Webhook struct {
	cfg   Config
	queue chan agent.Notification // in memory (no Store)
	// kick wakes the durable sender; one pending wake-up is enough (overflow: already awake).
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64
	sent    atomic.Int64
	// ownClient: the client is NewClient's, made for this Webhook (Close closes its idle
	// connections).
	ownClient bool
}

var _ agent.Notifier = (*Webhook)(nil)

// New checks cfg and starts the sender; Close stops it.
func New(cfg Config) (*Webhook, error) {
	own := cfg.Client == nil
	cfg, err := checked(cfg)
	if err != nil {
		return nil, err
	}
	w := &Webhook{cfg: cfg, queue: make(chan agent.Notification, cfg.Queue), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), ownClient: own}
	if cfg.Store != nil {
		go w.runDurable()
	} else {
		go w.run()
	}
	return w, nil
}

// checked is cfg checked, with its defaults.
func checked(cfg Config) (Config, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Config{}, fmt.Errorf("PARLEY_NOTIFY_URL %q is not an http(s) URL", cfg.URL)
	}
	if cfg.Production && u.Scheme != "https" {
		return Config{}, errors.New("PARLEY_NOTIFY_URL must be https in production")
	}
	if len(cfg.Secret) == 0 {
		return Config{}, errors.New("PARLEY_NOTIFY_SECRET is required with PARLEY_NOTIFY_URL: notifications are signed")
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
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
		if cfg.Store != nil {
			cfg.Attempts = 8
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Poll, time.Second)
	def(&cfg.Lease, 2*time.Minute)
	def(&cfg.RetryBase, 2*time.Second)
	def(&cfg.RetryMax, 5*time.Minute)
	return cfg, nil
}

// Notify queues n; it never blocks (a full queue drops n). With a Store, n is already in the
// outbox: Notify wakes the sender.
func (w *Webhook) Notify(n agent.Notification) {
	if w.cfg.Store != nil {
		select {
		case w.kick <- struct{}{}:
		default:
		}
		return
	}
	select {
	case w.queue <- n:
	default:
		w.dropped.Add(1)
		w.cfg.Logger.Warn("notification dropped: the queue is full", "type", n.Type, "tool_call_id", n.ToolCallID)
	}
}

// Dropped and Sent count notifications dropped (at a full queue, or given up after Attempts)
// and delivered.
func (w *Webhook) Dropped() int64 { return w.dropped.Load() }

// Sent counts notifications delivered (a 2xx answer).
func (w *Webhook) Sent() int64 { return w.sent.Load() }

// Close stops the sender, cancelling the post in flight; what is still queued in memory is
// dropped, what is in the outbox stays there for the next sender. It is safe to call more than
// once.
func (w *Webhook) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	if w.ownClient {
		w.cfg.Client.CloseIdleConnections()
	}
}

// stopContext is a context that ends when Close is called (or cancel is).
func (w *Webhook) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-w.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

func (w *Webhook) run() {
	defer close(w.done)
	ctx, cancel := w.stopContext()
	defer cancel()
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

// runDurable is the durable sender: it claims due rows of the outbox and posts them, then
// sleeps until woken, polled or stopped.
func (w *Webhook) runDurable() {
	defer close(w.done)
	ctx, cancel := w.stopContext()
	defer cancel()
	poll := w.cfg.Clock.NewTimer(w.cfg.Poll)
	defer poll.Stop()
	for {
		for ctx.Err() == nil {
			// Claims and their bookkeeping run to the end even when Close comes: a claim cut
			// short could commit unseen and hold its rows for the whole lease.
			bctx, bcancel := bookkeeping(ctx)
			due, err := w.cfg.Store.ClaimNotify(bctx, w.cfg.Clock.Now(), w.cfg.Lease, ClaimBatch)
			bcancel()
			if err != nil {
				if ctx.Err() == nil {
					w.cfg.Logger.Warn("notifications: read the outbox", "err", err)
				}
				break
			}
			for i, m := range due {
				if ctx.Err() != nil {
					w.release(due[i:]) // stopping: the next sender posts them at once
					break
				}
				w.deliverDurable(ctx, m)
			}
			if len(due) < ClaimBatch {
				break
			}
		}
		select {
		case <-w.stop:
			return
		case <-w.kick:
		case <-poll.C():
			poll.Reset(w.cfg.Poll)
		}
	}
}

// deliverDurable posts one claimed row, with its id as the webhook-id, and records the outcome:
// delivered (removed), failed (due again after a backoff), or given up after Attempts (removed,
// counted as dropped, logged). A post cut short by Close counts no attempt and gives its claim
// up: the next sender posts it again at once (the receiver may see its webhook-id twice).
func (w *Webhook) deliverDurable(ctx context.Context, m store.NotifyMessage) {
	err := w.post(ctx, m.ID, m.Payload)
	if ctx.Err() != nil {
		w.release([]store.NotifyMessage{m})
		return
	}
	// What the post's outcome records is not cut short by Close (a cancelled update would leave
	// the row leased for the whole lease).
	bctx, bcancel := bookkeeping(ctx)
	defer bcancel()
	if err == nil {
		w.sent.Add(1)
		if err := w.cfg.Store.CompleteNotify(bctx, m.ID); err != nil {
			w.cfg.Logger.Warn("notifications: mark delivered", "id", m.ID, "err", err)
		}
		return
	}
	attempts := m.Attempts + 1
	if attempts >= w.cfg.Attempts {
		w.dropped.Add(1)
		w.cfg.Logger.Warn("notification not delivered: giving up", "id", m.ID, "attempts", attempts, "err", err)
		if err := w.cfg.Store.CompleteNotify(bctx, m.ID); err != nil {
			w.cfg.Logger.Warn("notifications: drop", "id", m.ID, "err", err)
		}
		return
	}
	pause := w.cfg.RetryBase << min(attempts-1, 20)
	if pause > w.cfg.RetryMax || pause <= 0 {
		pause = w.cfg.RetryMax
	}
	if err := w.cfg.Store.RetryNotify(bctx, m.ID, w.cfg.Clock.Now().Add(pause), err.Error()); err != nil {
		w.cfg.Logger.Warn("notifications: schedule a retry", "id", m.ID, "err", err)
	}
}

// bookkeeping is the context of the outbox's own reads and writes: ctx's values without its
// cancellation (Close), bounded by storeTimeout.
func bookkeeping(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// storeTimeout bounds one outbox statement of the durable sender.
const storeTimeout = 5 * time.Second

// release gives claims up as the sender stops (Close cut their posts short, or they were not
// posted yet), so the next sender — another process, or this one after a restart — posts them
// at once instead of after the lease. A release that fails leaves the lease to run out.
func (w *Webhook) release(msgs []store.NotifyMessage) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, m := range msgs {
		if err := w.cfg.Store.ReleaseNotify(ctx, m.ID); err != nil {
			w.cfg.Logger.Warn("notifications: release a claim", "id", m.ID, "err", err)
			return
		}
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
		// The client's error names the URL, whose path or query may hold the relay's secret
		// (a Slack hook's path, ?token=): keep only what went wrong. It is logged and stored.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("post to the notification URL: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", res.Status)
	}
	return nil
}

// NewClient is the client notifications are posted with by default: a 10 s timeout, no proxy
// from the environment (HTTP_PROXY and the like: the post goes straight to the URL the
// operator set), and redirects returned as they are, never followed, so the signature headers
// are sent to PARLEY_NOTIFY_URL only; a 3xx is a failed delivery, retried as any other. Unlike a
// webhook tool's client (httpadapter.NewClient) it dials loopback and private addresses: the
// operator chose the URL, often a relay on the same network.
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxResponseHeaderBytes = 64 << 10
	return &http.Client{
		Transport:     tr,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
