package auth

import (
	"sync"
	"time"

	"parley/internal/clock"
)

// Throttle slows password guessing. A hard throttle (NewThrottle) locks a key (a client
// address, a subnet) after max failed sign-ins within window, until window has passed since its
// first counted failure. A progressive one (NewProgressive, for an account) never locks: after
// its free failures each further one doubles the wait before the next try, up to a cap, so
// guessing slows down but nobody can lock an account for long. A success clears the key.
// Entries are dropped once their window is over, and the table is capped (maxKeys): when full,
// expired entries are swept and, if it is still full, an arbitrary entry is evicted, so a flood
// of new keys neither grows the table nor stops the tracking of new ones.
type Throttle struct {
	clock  clock.Clock
	max    int
	window time.Duration
	// Progressive throttles: the failures that cost nothing, then base doubling up to maxWait.
	progressive   bool
	base, maxWait time.Duration

	maxKeys int // 0: maxKeys; tests set a small one

	mu   sync.Mutex
	keys map[string]*attempts // guarded by mu
}

type attempts struct {
	first    time.Time
	last     time.Time
	failures int
}

// maxKeys bounds the throttle's memory.
const maxKeys = 100_000

// NewThrottle returns a throttle allowing max failures per key within window.
func NewThrottle(c clock.Clock, max int, window time.Duration) *Throttle {
	return &Throttle{clock: c, max: max, window: window, keys: map[string]*attempts{}}
}

// NewProgressive returns a throttle that lets free failures of a key within window go by and
// then makes each next try wait base, 2×base, 4×base … after the last failure, at most maxWait.
func NewProgressive(c clock.Clock, free int, window, base, maxWait time.Duration) *Throttle {
	return &Throttle{clock: c, max: free, window: window, progressive: true, base: base, maxWait: maxWait, keys: map[string]*attempts{}}
}

// Wait returns how long key must wait before trying again; 0 means it may try now.
func (t *Throttle) Wait(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitLocked(key)
}

// Reserve is Wait and, when key may try now, counts the try as a failure at once (Succeed or
// Undo take it back): tries made at the same moment cannot all pass the check before any of
// them is counted.
func (t *Throttle) Reserve(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.waitLocked(key); w > 0 {
		return w
	}
	t.failLocked(key)
	return 0
}

// Undo takes back one counted failure of key (a reserved try that succeeded).
func (t *Throttle) Undo(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a, ok := t.keys[key]; ok && a.failures > 0 {
		a.failures--
	}
}

func (t *Throttle) waitLocked(key string) time.Duration {
	a, ok := t.keys[key]
	if !ok {
		return 0
	}
	now := t.clock.Now()
	if !now.Before(a.first.Add(t.window)) {
		delete(t.keys, key)
		return 0
	}
	return t.WaitOf(Attempts{First: a.first, Last: a.last, Failures: a.failures}, now)
}

// Attempts are the failures counted against one key, wherever they are kept: the throttle's
// own table, or a database every process shares (web's sign-in limits). The zero value is a
// key with none.
type Attempts struct {
	First, Last time.Time
	Failures    int
}

// WaitOf is the throttle's rule, apart from where the counts live: how long a key with the
// attempts a must wait at now before it tries again (0: it may try now).
func (t *Throttle) WaitOf(a Attempts, now time.Time) time.Duration {
	end := a.First.Add(t.window)
	if a.Failures == 0 || !now.Before(end) || a.Failures < t.max {
		return 0
	}
	if t.progressive {
		wait := t.base
		for i := t.max; i < a.Failures && wait < t.maxWait; i++ {
			wait *= 2
		}
		wait = min(wait, t.maxWait)
		return max(a.Last.Add(wait).Sub(now), 0)
	}
	return end.Sub(now)
}

// Counted is a with one more failure at now; a window that is over starts again.
func (t *Throttle) Counted(a Attempts, now time.Time) Attempts {
	if a.Failures == 0 || !now.Before(a.First.Add(t.window)) {
		a = Attempts{First: now}
	}
	a.Failures++
	a.Last = now
	return a
}

// Window is how long a key's failures count from the first.
func (t *Throttle) Window() time.Duration { return t.window }

// Fail records a failed attempt of key.
func (t *Throttle) Fail(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(key)
}

func (t *Throttle) failLocked(key string) {
	now := t.clock.Now()
	a, ok := t.keys[key]
	if ok && !now.Before(a.first.Add(t.window)) {
		ok = false
	}
	if !ok {
		if len(t.keys) >= t.limit() {
			t.sweepLocked(now)
			for k := range t.keys { // still full: evict one (map order is arbitrary)
				if len(t.keys) < t.limit() {
					break
				}
				delete(t.keys, k)
			}
		}
		a = &attempts{first: now}
		t.keys[key] = a
	}
	a.failures++
	a.last = now
}

// limit is the table's size cap (smaller in tests).
func (t *Throttle) limit() int {
	if t.maxKeys > 0 {
		return t.maxKeys
	}
	return maxKeys
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
