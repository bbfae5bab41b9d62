package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
)

// CheckClock checks the rules that read the store's clock on s, a new empty store opened with
// clk (a fake clock whose time is t0): rows are stamped with the clock's time, a session expires
// at its ExpiresAt on that clock, and TouchAPIToken moves LastUsedAt at most once per
// store.TokenTouchEvery. It advances clk.
func CheckClock(t *testing.T, s store.Store, clk *clock.Fake, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "u"})
	if err != nil || !c.CreatedAt.Equal(t0) {
		t.Fatalf("CreatedAt = %v (err %v), want the fake clock's %v", c.CreatedAt, err, t0)
	}
	u, err := s.CreateUser(ctx, store.User{Name: "ana"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, store.Session{TokenHash: []byte("h"), UserID: u.ID, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.CreateAPIToken(ctx, store.APIToken{UserID: u.ID, Name: "ci", Hash: []byte("token-hash")})
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() *time.Time {
		t.Helper()
		got, err := s.APITokenByHash(ctx, tok.Hash)
		if err != nil {
			t.Fatal(err)
		}
		return got.LastUsedAt
	}

	if err := s.TouchAPIToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	first := lastUsed()
	if first == nil || first.Before(t0) || first.After(t0.Add(time.Millisecond)) {
		t.Fatalf("LastUsedAt after the first touch = %v, want the clock's %v", first, t0)
	}
	clk.Advance(store.TokenTouchEvery - time.Second)
	if err := s.TouchAPIToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(*first) {
		t.Fatalf("a touch within TokenTouchEvery moved LastUsedAt from %v to %v", first, got)
	}
	clk.Advance(2 * time.Second)
	if err := s.TouchAPIToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if got, want := lastUsed(), clk.Now(); got == nil || got.Before(want) || got.After(want.Add(time.Millisecond)) {
		t.Fatalf("a touch more than TokenTouchEvery later left LastUsedAt at %v, want %v", got, want)
	}

	if _, err := s.SessionByHash(ctx, []byte("h")); err != nil {
		t.Fatalf("session before expiry: %v", err)
	}
	clk.Advance(t0.Add(time.Hour).Sub(clk.Now()))
	if _, err := s.SessionByHash(ctx, []byte("h")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("session at its expiry on the store's clock: err = %v, want ErrNotFound", err)
	}

	// A token with an expiry is found until then, on the store's clock, and not at it.
	exp := clk.Now().Add(time.Minute)
	if _, err := s.CreateAPIToken(ctx, store.APIToken{UserID: u.ID, Name: "short", Hash: []byte("short-hash"), ExpiresAt: &exp}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.APITokenByHash(ctx, []byte("short-hash")); err != nil {
		t.Fatalf("a token before its expiry: %v", err)
	}
	clk.Advance(time.Minute)
	if _, err := s.APITokenByHash(ctx, []byte("short-hash")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a token at its expiry on the store's clock: err = %v, want ErrNotFound", err)
	}
}
