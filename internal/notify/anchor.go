package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"parley/internal/store"
)

// AnchorType is the type of the notifications that carry the audit chain's head.
const AnchorType = "audit.anchor"

// AnchorPayload is the body of an audit.anchor notification: the chain's head as a process
// committed it, signed with the audit key (store.AuditHead: the same object as a line of an
// anchor file, so a receiver that appends Anchor as a line makes a file `web audit verify
// --anchor` reads).
type AnchorPayload struct {
	Type   string          `json:"type"`
	Anchor store.AuditHead `json:"anchor"`
}

// AnchorSender posts the audit chain's heads to the notification webhook
// (PARLEY_AUDIT_ANCHOR_WEBHOOK). Unlike approval notifications it never goes through the
// store's outbox: the database is what the anchor is there to check, and a head queued in it
// could be removed with the records it names. It posts from memory, the newest head waiting
// (heads that arrive meanwhile are coalesced), retrying a failure with a growing pause until
// it is delivered or a newer head replaces it. What is waiting when the process stops is lost
// (the anchor file, if any, has it). The webhook-id is the head's place and key, so a receiver
// drops a repeat.
type AnchorSender struct {
	cfg     Config
	mu      sync.Mutex
	pending *store.AuditHead
	sent    int64 // the place of the newest head delivered
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	own     bool // the client is NewClient's, made for this sender
}

var _ store.AuditAnchor = (*AnchorSender)(nil)

// NewAnchorSender checks cfg as New does (its URL, Secret, Production, Client, Clock and Logger
// are used) and starts the sender; Close stops it.
func NewAnchorSender(cfg Config) (*AnchorSender, error) {
	own := cfg.Client == nil
	cfg, err := checked(Config{URL: cfg.URL, Secret: cfg.Secret, Production: cfg.Production, Client: cfg.Client, Clock: cfg.Clock, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	a := &AnchorSender{cfg: cfg, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), own: own}
	go a.run(&Webhook{cfg: cfg})
	return a, nil
}

// Anchor queues h; it never blocks.
func (a *AnchorSender) Anchor(h store.AuditHead) {
	a.mu.Lock()
	if h.Seq > a.sent && (a.pending == nil || h.Seq > a.pending.Seq) {
		a.pending = &h
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Close stops the sender, cancelling a post in flight. Calling it twice is harmless.
func (a *AnchorSender) Close() {
	a.once.Do(func() { close(a.stop) })
	<-a.done
	if a.own {
		a.cfg.Client.CloseIdleConnections()
	}
}

func (a *AnchorSender) run(w *Webhook) {
	defer close(a.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-a.stop
		cancel()
	}()
	pause := time.Second
	for {
		select {
		case <-a.stop:
			return
		case <-a.kick:
		}
		for {
			a.mu.Lock()
			h := a.pending
			a.mu.Unlock()
			if h == nil {
				break
			}
			body, _ := json.Marshal(AnchorPayload{Type: AnchorType, Anchor: *h}) // a head always encodes
			err := w.post(ctx, fmt.Sprintf("anc_%s_%d", h.KeyID, h.Seq), body)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				a.cfg.Logger.Warn("audit anchor not delivered to the webhook; retrying", "seq", h.Seq, "err", err)
				select {
				case <-a.stop:
					return
				case <-a.cfg.Clock.After(pause):
				}
				pause = min(2*pause, 5*time.Minute)
				continue
			}
			pause = time.Second
			a.mu.Lock()
			a.sent = max(a.sent, h.Seq)
			if a.pending != nil && a.pending.Seq <= a.sent {
				a.pending = nil
			}
			a.mu.Unlock()
		}
	}
}
