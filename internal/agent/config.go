package agent

import (
	"fmt"
	"log/slog"
	"time"

	"parley/internal/clock"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// Config wires a Manager. Store, Provider and Tools are required; every other field has a
// default (see the field comments), applied by New.
type Config struct {
	Store    store.Store
	Provider llm.Provider
	Tools    *tools.Registry
	Clock    clock.Clock  // clock.Real{} when nil
	Logger   *slog.Logger // slog.Default() when nil
	// System is the system prompt of every LLM call.
	System string
	// MaxTokens bounds each model answer; 0 leaves it to the provider.
	MaxTokens int

	// DefaultTimeout bounds a suspension (approval, question, client run) of a tool that has no
	// timeout of its own. Default 10m.
	DefaultTimeout time.Duration
	// ToolTimeout bounds one run of a server tool that has no timeout of its own. Default 30s.
	ToolTimeout time.Duration
	// ClientGrace is how long a client call waits for a live socket before it fails with
	// no_client. Default 5s.
	ClientGrace time.Duration
	// IdleTimeout is how long an actor with nothing running stays in memory. Default 5m.
	IdleTimeout time.Duration
	// MaxIterations caps the LLM calls of one user turn. Default 10.
	MaxIterations int
	// MailboxSize bounds each actor's request queue. When it is full a caller blocks until its
	// context is done. Default 64.
	MailboxSize int
	// ExpiryPoll is how often durable expiries are claimed. Default 1s.
	ExpiryPoll time.Duration
	// ExpiryLease is how long a claimed expiry is hidden from other claimers. Default 30s.
	ExpiryLease time.Duration
	// RetryBase and RetryMax shape the exponential backoff of retries. Defaults 500ms and 30s.
	RetryBase time.Duration
	RetryMax  time.Duration
	// LLMMaxAttempts bounds tries of a transient model failure. Default 4.
	LLMMaxAttempts int
	// MaxOutputBytes bounds a result envelope of a tool that sets no bound. Default
	// tools.DefaultMaxOutputBytes.
	MaxOutputBytes int
	// SubscriberBuffer is each subscription's buffer; a subscriber that falls this far behind
	// gets EventResync and is closed. Default 256.
	SubscriberBuffer int
}

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil || c.Provider == nil || c.Tools == nil {
		return c, fmt.Errorf("agent: Store, Provider and Tools are required")
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.DefaultTimeout, 10*time.Minute)
	def(&c.ToolTimeout, 30*time.Second)
	def(&c.ClientGrace, 5*time.Second)
	def(&c.IdleTimeout, 5*time.Minute)
	def(&c.ExpiryPoll, time.Second)
	def(&c.ExpiryLease, 30*time.Second)
	def(&c.RetryBase, 500*time.Millisecond)
	def(&c.RetryMax, 30*time.Second)
	defInt(&c.MaxIterations, 10)
	defInt(&c.MailboxSize, 64)
	defInt(&c.LLMMaxAttempts, 4)
	defInt(&c.MaxOutputBytes, tools.DefaultMaxOutputBytes)
	defInt(&c.SubscriberBuffer, 256)
	return c, nil
}
