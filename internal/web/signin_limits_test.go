package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/pgstore"
)

// onServer is e with its clients talking to another Server on a store of its own, as another
// process on the same database would (or the same process after a restart).
func (e *testEnv) onServer(t *testing.T, st store.Store, cfg Config) *testEnv {
	t.Helper()
	if cfg.PasswordCost == 0 {
		cfg.PasswordCost = e.srv.cfg.PasswordCost
	}
	srv := New(cfg, Deps{Store: st, Agent: e.m, Clock: e.clk, Logger: slog.New(slog.NewTextHandler(e.wlog, nil))})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		_ = st.Close()
	})
	other := *e
	other.srv, other.ts = srv, ts
	return &other
}

// TestSignInLimitsShared: the sign-in limits are kept in the database, so every process on it
// counts against one budget: tries spread over two servers on one PostgreSQL database spend the
// address's budget once (N servers used to give N× the budget), and a server started afresh on
// that database (a restart) still refuses.
func TestSignInLimitsShared(t *testing.T) {
	t.Parallel()
	dsn := pgMigrated.NewURL(t)
	open := func(t testing.TB, clk clock.Clock) store.Store {
		st, err := pgstore.Open(context.Background(), dsn, discardLogger(), pgstore.WithClock(clk))
		if err != nil {
			t.Fatalf("open postgres store: %v", err)
		}
		return st
	}
	cfg := Config{LoginFailuresPerIP: 4, LoginWindow: 15 * time.Minute}
	a := newTestEnv(t, open, cfg)
	a.user("ada", store.RoleMember)
	b := a.onServer(t, open(t, a.aclk), cfg)
	try := func(e *testEnv, name, password string) int {
		c := e.anon()
		res := c.postForm("/login", url.Values{"username": {name}, "password": {password}}, c.pageCSRF("/login"))
		readBody(res)
		return res.StatusCode
	}
	for i := range 4 { // four names, alternating servers: the address's four tries
		e := a
		if i%2 == 1 {
			e = b
		}
		if code := try(e, fmt.Sprintf("guess%d", i), "Winter2026!"); code != http.StatusUnauthorized {
			t.Fatalf("try %d = %d, want 401", i, code)
		}
	}
	for _, e := range []*testEnv{a, b} {
		if code := try(e, "guess9", "Winter2026!"); code != http.StatusTooManyRequests {
			t.Fatalf("a fifth try from the address = %d, want 429 on every server", code)
		}
	}
	// A server started afresh on the database (a restart) remembers.
	c := a.onServer(t, open(t, a.aclk), cfg)
	if code := try(c, "ada", "password-ada"); code != http.StatusTooManyRequests {
		t.Fatalf("after a restart a try from the address = %d, want 429", code)
	}
	// The window ends for every server at once.
	a.clk.Advance(15 * time.Minute)
	if code := try(c, "ada", "password-ada"); code != http.StatusSeeOther {
		t.Fatalf("after the window the right password = %d, want 303", code)
	}
}

// failingLimits is a store whose sign-in limits cannot be read (a database that fails).
type failingLimits struct {
	store.Store
	err error
}

func (f failingLimits) UpdateSignInAttempts(context.Context, []string, func([]store.SignInAttempts) []store.SignInAttempts) error {
	return fmt.Errorf("update sign-in attempts: %w", f.err)
}

// TestSignInLimitsUnavailable: when the sign-in limits cannot be read or written the try is
// refused with 503 unavailable and Retry-After (never let through uncounted, never a 500),
// whatever the failure: a refused connection or a statement the database rejects. Hostile
// names and addresses (NUL, invalid UTF-8, thousands of bytes) are keys like any other.
func TestSignInLimitsUnavailable(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, openSQLite, Config{})
	e.user("ada", store.RoleMember)
	for _, cause := range []error{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), errors.New("ERROR: relation \"signin_attempts\" does not exist")} {
		f := e.onServer(t, failingLimits{e.st, cause}, Config{})
		c := f.anon()
		res := c.postForm("/login", url.Values{"username": {"ada"}, "password": {"password-ada"}}, c.pageCSRF("/login"))
		if body := readBody(res); res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "2" || strings.Contains(body, "relation") {
			t.Fatalf("sign-in with the limits failing (%v) = %d Retry-After %q:\n%s", cause, res.StatusCode, res.Header.Get("Retry-After"), body)
		}
	}
	c := e.anon()
	for _, name := range []string{"a\x00b", "\xff\xfe", strings.Repeat("n", 5000)} {
		res := c.postForm("/login", url.Values{"username": {name}, "password": {"x"}}, c.pageCSRF("/login"))
		if readBody(res); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("sign-in as %.10q = %d, want 401", name, res.StatusCode)
		}
	}
}
