package web

import (
	"math"
	"sync"
	"time"

	"parley/internal/clock"
)

// bucket is a token bucket read through the injected clock: it holds up to burst tokens and
// gains rate tokens per second.
type bucket struct {
	tokens float64
	last   time.Time
}

// limiter keeps one bucket per key (a user id). Buckets that have refilled completely carry no
// information and are swept when the table grows past sweepAt, so memory follows active users.
type limiter struct {
	clock clock.Clock
	rate  float64 // tokens per second
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket // guarded by mu
}

const sweepAt = 10_000

func newLimiter(c clock.Clock, perMinute float64, burst int) *limiter {
	return &limiter{clock: c, rate: perMinute / 60, burst: float64(burst), buckets: map[string]*bucket{}}
}

// allow takes one token for key. When none is left it returns false and how long until one is.
func (l *limiter) allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= sweepAt {
			l.sweepLocked(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = l.refilled(b, now)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	need := (1 - b.tokens) / l.rate
	return false, time.Duration(need * float64(time.Second))
}

func (l *limiter) refilled(b *bucket, now time.Time) float64 {
	elapsed := now.Sub(b.last).Seconds()
	if elapsed < 0 {
		elapsed = 0
	}
	return math.Min(l.burst, b.tokens+elapsed*l.rate)
}

func (l *limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if l.refilled(b, now) >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// limiters are the per-user budgets.
type limiters struct {
	messages *limiter
	api      *limiter
}

func newLimiters(c clock.Clock, cfg Config) *limiters {
	return &limiters{
		messages: newLimiter(c, cfg.MessagesPerMinute, cfg.MessageBurst),
		api:      newLimiter(c, cfg.APIPerMinute, cfg.APIBurst),
	}
}

// retryAfterSeconds rounds a wait up to whole seconds, at least 1, for the Retry-After header.
func retryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}
