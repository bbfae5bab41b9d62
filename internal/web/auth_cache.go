package web

import (
	"sync"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
)

// Bearer-token lookups are cached briefly: every API request and event stream of a script
// carries its token, and without the cache each one cost two reads (the token, then its user)
// before the handler did anything.
//
// Staleness: a token revoked, or a user's role changed, through this process (the tokens page,
// the admin page) is dropped from the cache at once (a lookup of that token already under way
// may put it back, for at most the TTL). A change made elsewhere — `web token
// revoke` or another replica on the same database — takes effect within tokenCacheTTL.
const (
	// tokenCacheTTL is how long a token's user is trusted without asking the store again.
	tokenCacheTTL = 5 * time.Second
	// tokenCacheMax bounds the entries; when full, expired entries are swept and, if that frees
	// nothing, the whole cache is dropped (the next requests read the store again).
	tokenCacheMax = 10_000
	// tokenLookupTimeout bounds a shared token lookup, which no single request's context ends.
	tokenLookupTimeout = 10 * time.Second
)

// tokenCache maps a token's hash to the token (its scope and expiry) and its user. Entries live tokenCacheTTL on the injected clock.
type tokenCache struct {
	clock clock.Clock
	ttl   time.Duration
	max   int

	mu      sync.Mutex
	entries map[string]tokenEntry // guarded by mu
}

type tokenEntry struct {
	user    store.User
	token   store.APIToken
	expires time.Time
}

func newTokenCache(clk clock.Clock, ttl time.Duration, max int) *tokenCache {
	return &tokenCache{clock: clk, ttl: ttl, max: max, entries: map[string]tokenEntry{}}
}

// get returns the user and the token whose hash is hash, when cached and fresh.
func (tc *tokenCache) get(hash string) (store.User, store.APIToken, bool) {
	now := tc.clock.Now()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e, ok := tc.entries[hash]
	if !ok {
		return store.User{}, store.APIToken{}, false
	}
	if !now.Before(e.expires) {
		delete(tc.entries, hash)
		return store.User{}, store.APIToken{}, false
	}
	return e.user, e.token, true
}

// put remembers a token and its user for the TTL.
func (tc *tokenCache) put(hash string, t store.APIToken, u store.User) {
	now := tc.clock.Now()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if _, ok := tc.entries[hash]; !ok && len(tc.entries) >= tc.max {
		for h, e := range tc.entries {
			if !now.Before(e.expires) {
				delete(tc.entries, h)
			}
		}
		if len(tc.entries) >= tc.max {
			clear(tc.entries)
		}
	}
	tc.entries[hash] = tokenEntry{user: u, token: t, expires: now.Add(tc.ttl)}
}

// forgetUser drops every cached token of userID (a token revoked, a role changed).
func (tc *tokenCache) forgetUser(userID string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for h, e := range tc.entries {
		if e.user.ID == userID {
			delete(tc.entries, h)
		}
	}
}

// forget drops the cached token whose hash is hash.
func (tc *tokenCache) forget(hash string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.entries, hash)
}

// len is the number of entries, for tests.
func (tc *tokenCache) len() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.entries)
}
