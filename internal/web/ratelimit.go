package web

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/clock"
	"parley/internal/fault"
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
	pages    *limiter // page POSTs and socket upgrades
	previews *limiter // plan previews (plan.go), page and API
	searches *limiter // searches (allowSearch), page and API
}

func newLimiters(c clock.Clock, cfg Config) *limiters {
	return &limiters{
		messages: newLimiter(c, cfg.MessagesPerMinute, cfg.MessageBurst),
		api:      newLimiter(c, cfg.APIPerMinute, cfg.APIBurst),
		pages:    newLimiter(c, cfg.PagesPerMinute, cfg.PageBurst),
		previews: newLimiter(c, cfg.PreviewsPerMinute, cfg.PreviewBurst),
		searches: newLimiter(c, cfg.SearchesPerMinute, cfg.SearchBurst),
	}
}

// allowSearch spends one token of the user's search budget when q is a search (not blank: a
// blank one lists the conversations, as without it): a 429 with Retry-After beyond it.
func (s *Server) allowSearch(c echo.Context, q string) error {
	u := currentUser(c)
	if u == nil || strings.TrimSpace(q) == "" {
		return nil
	}
	if ok, wait := s.limits.searches.allow(u.ID); !ok {
		return rateLimitedError("searches", retryAfterSeconds(wait))
	}
	return nil
}

// connRetryAfter is the wait a caller at its connection cap is told (Retry-After): a live
// connection ends when its page or stream closes, which the server cannot foresee.
const connRetryAfter = 5

// conns counts the live connections (sockets, event streams) of this process, per user and in
// all, against MaxConnsPerUser and MaxConns. The mutex guards only the counts.
type conns struct {
	mu      sync.Mutex
	perUser map[string]int
	total   int
}

// open takes a place for a live connection of userID, or says why there is none; the returned
// release gives it back (call it once, when the connection ends).
func (s *Server) openConn(userID string) (release func(), err error) {
	k := &s.conns
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.perUser[userID] >= s.cfg.MaxConnsPerUser:
		return nil, fault.New(fault.KindRateLimited, fmt.Sprintf("you have %d live connections open (sockets and event streams), the most one person may: close one first", s.cfg.MaxConnsPerUser),
			map[string]any{"limit": s.cfg.MaxConnsPerUser, "retry_after_seconds": connRetryAfter})
	case k.total >= s.cfg.MaxConns:
		return nil, fault.New(fault.KindServiceUnavailable, "the server holds as many live connections as it may: try again later", nil)
	}
	if k.perUser == nil {
		k.perUser = map[string]int{}
	}
	k.perUser[userID]++
	k.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.perUser[userID]--; k.perUser[userID] <= 0 {
				delete(k.perUser, userID)
			}
			k.total--
		})
	}, nil
}

// retryAfterSeconds rounds a wait up to whole seconds, at least 1, for the Retry-After header.
func retryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}
