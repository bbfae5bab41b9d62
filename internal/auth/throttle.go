package auth

import (
	"sync"
	"time"

	"parley/internal/clock"
)

// Throttle slows password guessing: after max failed sign-ins for one key (name and client IP)
// within window, that key is locked until window has passed since its first counted failure.
// A success clears the key. Entries are dropped once their window is over, and the table is
// capped (maxKeys): when full, expired entries are swept, and if it is still full the new key
// is not tracked, which fails open for new keys rather than growing without bound.
type Throttle struct {
	clock  clock.Clock
	max    int
	window time.Duration

	mu   sync.Mutex
	keys map[string]*attempts // guarded by mu
}

type attempts struct {
	first    time.Time
	failures int
}

// maxKeys bounds the throttle's memory.
const maxKeys = 100_000

// NewThrottle returns a throttle allowing max failures per key within window.
func NewThrottle(c clock.Clock, max int, window time.Duration) *Throttle {
	return &Throttle{clock: c, max: max, window: window, keys: map[string]*attempts{}}
}

// Wait returns how long key must wait before trying again; 0 means it may try now.
func (t *Throttle) Wait(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	a, ok := t.keys[key]
	if !ok {
		return 0
	}
	now := t.clock.Now()
	end := a.first.Add(t.window)
	if !now.Before(end) {
		delete(t.keys, key)
		return 0
	}
	if a.failures < t.max {
		return 0
	}
	return end.Sub(now)
}

// Fail records a failed attempt of key.
func (t *Throttle) Fail(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	a, ok := t.keys[key]
	if ok && !now.Before(a.first.Add(t.window)) {
		ok = false
	}
	if !ok {
		if len(t.keys) >= maxKeys {
			t.sweepLocked(now)
			if len(t.keys) >= maxKeys {
				return
			}
		}
		a = &attempts{first: now}
		t.keys[key] = a
	}
	a.failures++
}

// Succeed clears key after a successful sign-in.
func (t *Throttle) Succeed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, key)
}

func (t *Throttle) sweepLocked(now time.Time) {
	for k, a := range t.keys {
		if !now.Before(a.first.Add(t.window)) {
			delete(t.keys, k)
		}
	}
}
