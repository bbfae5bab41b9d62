// Package storetest is the conformance suite every store.Store implementation passes.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.PerTest(newDatabase, openHandle))
//	}
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/store"
)

// Opener returns a handle on the database of the (sub)test t. The first call for a t creates an
// empty database; every later call with the same t opens ANOTHER handle on that same database
// (as a second process, or the same process after a restart would). The opener closes the
// handles it returned when t ends; closing one earlier is allowed.
type Opener func(t *testing.T) store.Store

// PerTest builds an Opener from create, which makes a new empty database for t and returns its
// address (a URL, a file path), and open, which returns a handle on an address.
func PerTest(create func(t *testing.T) string, open func(t *testing.T, addr string) store.Store) Opener {
	var mu sync.Mutex
	addrs := map[*testing.T]string{}
	return func(t *testing.T) store.Store {
		t.Helper()
		mu.Lock()
		addr, ok := addrs[t]
		if !ok {
			addr = create(t)
			addrs[t] = addr
			t.Cleanup(func() {
				mu.Lock()
				delete(addrs, t)
				mu.Unlock()
			})
		}
		mu.Unlock()
		s := open(t, addr)
		t.Cleanup(func() { _ = s.Close() }) // a second Close is harmless; an early one is the test's
		return s
	}
}

// Option configures Run.
type Option func(*suite)

type suite struct {
	failAudit func(t *testing.T, s store.Store, action string)
	exec      func(t *testing.T, s store.Store, sql string, args ...any) error
	tamper    func(t *testing.T, s store.Store, sql string, args ...any)
}

// WithFailingAudit gives the suite install, which makes the database behind s refuse every later
// insert of an audit record whose Action is action (a trigger that raises an error). Audit rows
// are the last thing an Append writes, so the suite can fail a batch after every other row of it
// was written, inside the database, and check that none of them stays. Every store passes one:
// without it the FailedLastStatement test fails.
func WithFailingAudit(install func(t *testing.T, s store.Store, action string)) Option {
	return func(c *suite) { c.failAudit = install }
}

// Run runs every conformance test against the store open returns.
func Run(t *testing.T, open Opener, opts ...Option) {
	var cfg suite
	for _, o := range opts {
		o(&cfg)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"Users", testUsers},
		{"Sessions", testSessions},
		{"APITokens", testAPITokens},
		{"TokenScopeAndExpiry", testTokenScopeAndExpiry},
		{"Invitations", testInvitations},
		{"InvitationRace", testInvitationRace},
		{"Settings", testSettings},
		{"Conversations", testConversations},
		{"RenameDeleteSearch", testRenameDeleteSearch},
		{"FindConversations", testFindConversations},
		{"AppendAndLog", testAppendAndLog},
		{"LogPages", testLogPages},
		{"AppendRace", testAppendRace},
		{"AppendRaceTwoHandles", testAppendRaceTwoHandles},
		{"BatchAtomicity", testBatchAtomicity},
		{"FailedLastStatement", func(t *testing.T, open Opener) { testFailedLastStatement(t, open, cfg.failAudit) }},
		{"LargeAndUnicode", testLargeAndUnicode},
		{"Timestamps", testTimestamps},
		{"ToolCallsUpsert", testToolCallsUpsert},
		{"ListPending", testListPending},
		{"Expiries", testExpiries},
		{"ExpiriesInBatch", testExpiriesInBatch},
		{"ClaimTwoHandles", testClaimTwoHandles},
		{"ExpiriesDueWhileDown", testExpiriesDueWhileDown},
		{"Steps", testSteps},
		{"Outbox", testOutbox},
		{"Usage", testUsage},
		{"FirstAdmin", testFirstAdmin},
		{"EndSessions", testEndSessions},
		{"SignInAttempts", testSignInAttempts},
		{"Audit", testAudit},
		{"AuditChain", func(t *testing.T, open Opener) { testAuditChain(t, open, cfg.tamper) }},
		{"AuditAppendOnly", func(t *testing.T, open Opener) { testAuditAppendOnly(t, open, cfg.exec) }},
		{"AuditTruncated", func(t *testing.T, open Opener) { testAuditTruncated(t, open, cfg.tamper) }},
		{"AuditRechained", func(t *testing.T, open Opener) { testAuditRechained(t, open, cfg.tamper) }},
		{"Grants", testGrants},
		{"Claims", testClaims},
		{"NotifyOutbox", testNotifyOutbox},
		{"Ping", testPing},
		{"SchemaVersion", testSchemaVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// must fails the test on err, else returns v: must(s.Get(ctx, id))(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func newConv(t *testing.T, s store.Store, owner, title string) store.Conversation {
	t.Helper()
	return must(s.CreateConversation(ctxT(t), store.Conversation{OwnerID: owner, Title: title}))(t)
}

func entry(typ store.EntryType, callID, data string) store.Entry {
	return store.Entry{Type: typ, ToolCallID: callID, Actor: "model", Data: json.RawMessage(data)}
}

// callEntries appends a tool_call entry plus its row for each id, awaiting approval.
func callBatch(ids ...string) store.Batch {
	var b store.Batch
	for _, id := range ids {
		b.Entries = append(b.Entries, entry(store.EntryToolCall, id, `{"name":"send_email"}`))
		b.Calls = append(b.Calls, store.ToolCall{ToolCallID: id, Name: "send_email", Executor: "server", Approval: "always",
			Approvers: "owner", Status: store.CallAwaiting, PendingKind: "approval", Args: json.RawMessage(`{"to":"a@example.com"}`)})
	}
	return b
}

func testUsers(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	if n := must(s.CountUsers(ctx))(t); n != 0 {
		t.Fatalf("CountUsers on a new store = %d", n)
	}
	a := must(s.CreateUser(ctx, store.User{Name: "ana", PasswordHash: []byte("$2a$hash")}))(t)
	if a.ID == "" || a.Role != store.RoleMember || a.CreatedAt.IsZero() {
		t.Fatalf("CreateUser defaults: %+v (want an id, role member, a creation time)", a)
	}
	b := must(s.CreateUser(ctx, store.User{ID: "given-id", Name: "Zoë 🦊", Role: store.RoleAdmin}))(t)
	if b.ID != "given-id" {
		t.Fatalf("CreateUser replaced the caller's id: %q", b.ID)
	}
	_, err := s.CreateUser(ctx, store.User{Name: "ana"})
	wantErr(t, err, store.ErrConflict, "CreateUser with a taken name")
	_, err = s.CreateUser(ctx, store.User{ID: "given-id", Name: "other"})
	wantErr(t, err, store.ErrConflict, "CreateUser with a taken id")

	if got := must(s.UserByID(ctx, a.ID))(t); got.Name != "ana" || !bytes.Equal(got.PasswordHash, []byte("$2a$hash")) || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("UserByID = %+v, want %+v", got, a)
	}
	if got := must(s.UserByName(ctx, "Zoë 🦊"))(t); got.ID != "given-id" || got.Role != store.RoleAdmin {
		t.Fatalf("UserByName = %+v", got)
	}
	_, err = s.UserByID(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "UserByID of a missing user")
	_, err = s.UserByName(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "UserByName of a missing user")

	if err := s.SetUserRole(ctx, a.ID, store.RoleReviewer); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.SetUserRole(ctx, "nope", store.RoleAdmin), store.ErrNotFound, "SetUserRole of a missing user")
	us := must(s.ListUsers(ctx))(t)
	if len(us) != 2 || us[0].Name != "ana" || us[0].Role != store.RoleReviewer || us[1].Name != "Zoë 🦊" {
		t.Fatalf("ListUsers = %+v", us)
	}
	if n := must(s.CountUsers(ctx))(t); n != 2 {
		t.Fatalf("CountUsers = %d, want 2", n)
	}

	if err := s.SetUserDisabled(ctx, a.ID, true); err != nil {
		t.Fatal(err)
	}
	if got := must(s.UserByName(ctx, "ana"))(t); !got.Disabled {
		t.Fatalf("disabled user reads %+v", got)
	}
	wantErr(t, s.SetUserDisabled(ctx, "given-id", true), store.ErrConflict, "SetUserDisabled of the last enabled admin")
	if got := must(s.UserByID(ctx, "given-id"))(t); got.Disabled {
		t.Fatal("the refused disable of the last admin was written")
	}
	wantErr(t, s.SetUserDisabled(ctx, "nope", true), store.ErrNotFound, "SetUserDisabled of a missing user")
	if err := s.SetUserDisabled(ctx, a.ID, false); err != nil {
		t.Fatal(err)
	}
	if us := must(s.ListUsers(ctx))(t); us[0].Disabled || us[1].Disabled {
		t.Fatalf("enabled again: %+v", us)
	}
}

func testSessions(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	u := must(s.CreateUser(ctx, store.User{Name: "ana"}))(t)
	live := store.Session{TokenHash: []byte{1, 2, 3, 0, 255}, UserID: u.ID, CSRF: "csrf-token", ExpiresAt: time.Now().Add(time.Hour)}
	expired := store.Session{TokenHash: []byte{9}, UserID: u.ID, CSRF: "x", ExpiresAt: time.Now().Add(-time.Second)}
	for _, ss := range []store.Session{live, expired} {
		if err := s.CreateSession(ctx, ss); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, s.CreateSession(ctx, live), store.ErrConflict, "CreateSession with a taken hash")
	got := must(s.SessionByHash(ctx, live.TokenHash))(t)
	if got.UserID != u.ID || got.CSRF != "csrf-token" || !got.ExpiresAt.Equal(live.ExpiresAt.Truncate(time.Microsecond)) || got.CreatedAt.IsZero() {
		t.Fatalf("SessionByHash = %+v", got)
	}
	_, err := s.SessionByHash(ctx, expired.TokenHash)
	wantErr(t, err, store.ErrNotFound, "SessionByHash of an expired session")
	_, err = s.SessionByHash(ctx, []byte{1, 2, 3})
	wantErr(t, err, store.ErrNotFound, "SessionByHash of a prefix of a hash")
	if err := s.DeleteSession(ctx, live.TokenHash); err != nil {
		t.Fatal(err)
	}
	_, err = s.SessionByHash(ctx, live.TokenHash)
	wantErr(t, err, store.ErrNotFound, "SessionByHash after DeleteSession")
	if err := s.DeleteSession(ctx, live.TokenHash); err != nil {
		t.Fatalf("deleting a missing session: %v", err)
	}
	wantErr(t, s.CreateSession(ctx, store.Session{TokenHash: []byte{7}, UserID: "no-such-user", ExpiresAt: time.Now().Add(time.Hour)}),
		store.ErrNotFound, "CreateSession for a missing user")
}

func testAPITokens(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	ana := must(s.CreateUser(ctx, store.User{Name: "ana"}))(t)
	bob := must(s.CreateUser(ctx, store.User{Name: "bob"}))(t)
	t1 := must(s.CreateAPIToken(ctx, store.APIToken{UserID: ana.ID, Name: "ci", Hash: []byte("h1")}))(t)
	t2 := must(s.CreateAPIToken(ctx, store.APIToken{UserID: ana.ID, Name: "webhook", Hash: []byte("h2")}))(t)
	if t1.ID == "" || t1.CreatedAt.IsZero() || t1.RevokedAt != nil || t1.LastUsedAt != nil {
		t.Fatalf("CreateAPIToken = %+v", t1)
	}
	_, err := s.CreateAPIToken(ctx, store.APIToken{UserID: bob.ID, Name: "dup", Hash: []byte("h1")})
	wantErr(t, err, store.ErrConflict, "CreateAPIToken with a taken hash")
	if got := must(s.APITokenByHash(ctx, []byte("h1")))(t); got.ID != t1.ID || got.UserID != ana.ID || got.Name != "ci" {
		t.Fatalf("APITokenByHash = %+v", got)
	}
	wantErr(t, s.RevokeAPIToken(ctx, bob.ID, t1.ID), store.ErrNotFound, "revoking another user's token")
	if _, err := s.APITokenByHash(ctx, []byte("h1")); err != nil {
		t.Fatalf("a failed revocation by another user revoked the token: %v", err)
	}
	if err := s.RevokeAPIToken(ctx, ana.ID, t1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.APITokenByHash(ctx, []byte("h1"))
	wantErr(t, err, store.ErrNotFound, "APITokenByHash of a revoked token")
	wantErr(t, s.RevokeAPIToken(ctx, ana.ID, "nope"), store.ErrNotFound, "revoking a missing token")
	ts := must(s.ListAPITokens(ctx, ana.ID))(t)
	if len(ts) != 2 || ts[0].ID != t2.ID || ts[1].ID != t1.ID || ts[1].RevokedAt == nil || ts[0].RevokedAt != nil {
		t.Fatalf("ListAPITokens = %+v, want t2 then revoked t1", ts)
	}
	first := *ts[1].RevokedAt
	if err := s.RevokeAPIToken(ctx, ana.ID, t1.ID); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
	if ts := must(s.ListAPITokens(ctx, ana.ID))(t); !ts[1].RevokedAt.Equal(first) {
		t.Fatalf("a second revocation moved the revocation time from %v to %v", first, ts[1].RevokedAt)
	}
	if ts := must(s.ListAPITokens(ctx, bob.ID))(t); len(ts) != 0 {
		t.Fatalf("bob's tokens = %+v, want none", ts)
	}

	// TouchAPIToken stamps a live token once (CheckClock tests the next minute), never a revoked
	// one, and ignores a missing one.
	before := time.Now().Add(-time.Second)
	for _, id := range []string{t2.ID, t2.ID, t1.ID, "nope"} {
		if err := s.TouchAPIToken(ctx, id); err != nil {
			t.Fatalf("TouchAPIToken(%s): %v", id, err)
		}
	}
	ts = must(s.ListAPITokens(ctx, ana.ID))(t)
	if used := ts[0].LastUsedAt; used == nil || used.Before(before) || used.Location() != time.UTC {
		t.Fatalf("LastUsedAt of a touched token = %v, want a UTC time after %v", used, before)
	}
	if ts[1].LastUsedAt != nil {
		t.Fatalf("a revoked token was touched: LastUsedAt = %v", ts[1].LastUsedAt)
	}
	if got := must(s.APITokenByHash(ctx, []byte("h2")))(t); got.LastUsedAt == nil || !got.LastUsedAt.Equal(*ts[0].LastUsedAt) {
		t.Fatalf("APITokenByHash LastUsedAt = %v, want %v", got.LastUsedAt, ts[0].LastUsedAt)
	}
}

// testTokenScopeAndExpiry: a token keeps its scope (none given: full) and its expiry; an expired
// token is not found by its hash but is still listed.
func testTokenScopeAndExpiry(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	ana := must(s.CreateUser(ctx, store.User{Name: "ana"}))(t)
	past, future := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond), time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	full := must(s.CreateAPIToken(ctx, store.APIToken{UserID: ana.ID, Name: "full", Hash: []byte("f")}))(t)
	if full.Scope != store.ScopeFull || full.ExpiresAt != nil {
		t.Fatalf("a token made without scope or expiry = %+v, want full, never expiring", full)
	}
	res := must(s.CreateAPIToken(ctx, store.APIToken{UserID: ana.ID, Name: "res", Hash: []byte("r"), Scope: store.ScopeResolve, ExpiresAt: &future}))(t)
	if got := must(s.APITokenByHash(ctx, []byte("r")))(t); got.ID != res.ID || got.Scope != store.ScopeResolve || got.ExpiresAt == nil || !got.ExpiresAt.Equal(future) {
		t.Fatalf("APITokenByHash of a resolve token = %+v, want scope resolve, expiry %v", got, future)
	}
	old := must(s.CreateAPIToken(ctx, store.APIToken{UserID: ana.ID, Name: "old", Hash: []byte("o"), ExpiresAt: &past}))(t)
	_, err := s.APITokenByHash(ctx, []byte("o"))
	wantErr(t, err, store.ErrNotFound, "APITokenByHash of an expired token")
	list := must(s.ListAPITokens(ctx, ana.ID))(t)
	if len(list) != 3 || list[0].ID != old.ID || list[0].ExpiresAt == nil || !list[0].ExpiresAt.Equal(past) {
		t.Fatalf("ListAPITokens = %+v, want the expired token listed first with its expiry", list)
	}
}

// testInvitations: an invitation is found by its hash whatever its state, listed newest first,
// redeemed once into an account with its role, and refused when used, revoked or expired.
func testInvitations(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	root := must(s.CreateUser(ctx, store.User{Name: "root", Role: store.RoleAdmin}))(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	week := now.Add(7 * 24 * time.Hour)
	inv := func(hash string, role store.Role, expires time.Time) store.Invitation {
		t.Helper()
		return must(s.CreateInvitation(ctx, store.Invitation{Hash: []byte(hash), Role: role, CreatedBy: root.ID, ExpiresAt: expires}))(t)
	}
	a := inv("a", store.RoleReviewer, week)
	if a.ID == "" || a.CreatedAt.IsZero() || a.Role != store.RoleReviewer || a.UsedAt != nil || a.RevokedAt != nil || a.CreatedBy != root.ID || !a.ExpiresAt.Equal(week) {
		t.Fatalf("CreateInvitation = %+v", a)
	}
	_, err := s.CreateInvitation(ctx, store.Invitation{Hash: []byte("a"), CreatedBy: root.ID, ExpiresAt: week})
	wantErr(t, err, store.ErrConflict, "CreateInvitation with a taken hash")
	b := inv("b", "", week)
	if b.Role != store.RoleMember {
		t.Fatalf("an invitation without a role is for %q, want member", b.Role)
	}
	expired := inv("x", store.RoleMember, now.Add(-time.Second))
	if list := must(s.ListInvitations(ctx))(t); len(list) != 3 || list[0].ID != expired.ID || list[2].ID != a.ID {
		t.Fatalf("ListInvitations = %+v, want newest first", list)
	}

	// Redeemed once: the account has the invitation's role; a second use is refused.
	ben := must(s.RedeemInvitation(ctx, []byte("a"), store.User{Name: "ben", PasswordHash: []byte("p")}, now))(t)
	if ben.Role != store.RoleReviewer || ben.ID == "" {
		t.Fatalf("RedeemInvitation = %+v, want a reviewer", ben)
	}
	if got := must(s.UserByName(ctx, "ben"))(t); got.ID != ben.ID || got.Role != store.RoleReviewer {
		t.Fatalf("the redeemed account = %+v", got)
	}
	used := must(s.InvitationByHash(ctx, []byte("a")))(t)
	if used.UsedAt == nil || used.UsedBy != ben.ID {
		t.Fatalf("a used invitation = %+v, want used by %s", used, ben.ID)
	}
	_, err = s.RedeemInvitation(ctx, []byte("a"), store.User{Name: "ben2"}, now)
	wantErr(t, err, store.ErrNotFound, "a second use of an invitation")
	wantErr(t, s.RevokeInvitation(ctx, a.ID), store.ErrNotFound, "revoking a used invitation")

	// A taken name leaves the invitation usable.
	_, err = s.RedeemInvitation(ctx, []byte("b"), store.User{Name: "ben"}, now)
	wantErr(t, err, store.ErrConflict, "redeeming with a taken name")
	if got := must(s.InvitationByHash(ctx, []byte("b")))(t); got.UsedAt != nil {
		t.Fatalf("a failed redemption used the invitation: %+v", got)
	}

	// Expired, revoked, missing: refused.
	_, err = s.RedeemInvitation(ctx, []byte("x"), store.User{Name: "xena"}, now)
	wantErr(t, err, store.ErrNotFound, "redeeming an expired invitation")
	if err := s.RevokeInvitation(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	first := must(s.InvitationByHash(ctx, []byte("b")))(t).RevokedAt
	if err := s.RevokeInvitation(ctx, b.ID); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
	if got := must(s.InvitationByHash(ctx, []byte("b")))(t).RevokedAt; first == nil || !got.Equal(*first) {
		t.Fatalf("a second revocation moved the time from %v to %v", first, got)
	}
	_, err = s.RedeemInvitation(ctx, []byte("b"), store.User{Name: "bea"}, now)
	wantErr(t, err, store.ErrNotFound, "redeeming a revoked invitation")
	_, err = s.RedeemInvitation(ctx, []byte("nope"), store.User{Name: "nobody"}, now)
	wantErr(t, err, store.ErrNotFound, "redeeming a missing invitation")
	_, err = s.InvitationByHash(ctx, []byte("nope"))
	wantErr(t, err, store.ErrNotFound, "InvitationByHash of a missing invitation")
	wantErr(t, s.RevokeInvitation(ctx, "nope"), store.ErrNotFound, "revoking a missing invitation")
	for _, name := range []string{"ben2", "xena", "bea", "nobody"} {
		_, err := s.UserByName(ctx, name)
		wantErr(t, err, store.ErrNotFound, "an account from a refused invitation "+name)
	}
}

// testInvitationRace: two handles redeeming one invitation at once make one account.
func testInvitationRace(t *testing.T, open Opener) {
	s1, ctx := open(t), ctxT(t)
	s2 := open(t)
	root := must(s1.CreateUser(ctx, store.User{Name: "root", Role: store.RoleAdmin}))(t)
	now := time.Now().UTC()
	must(s1.CreateInvitation(ctx, store.Invitation{Hash: []byte("once"), CreatedBy: root.ID, ExpiresAt: now.Add(time.Hour)}))(t)
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		h := []store.Store{s1, s2}[i%2]
		go func() {
			_, err := h.RedeemInvitation(ctx, []byte("once"), store.User{Name: fmt.Sprintf("racer%d", i)}, now)
			errs <- err
		}()
	}
	wins := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict):
			t.Errorf("a losing redemption: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d redemptions of one invitation succeeded, want 1", wins)
	}
	if users := must(s1.ListUsers(ctx))(t); len(users) != 2 {
		t.Fatalf("%d users after the race, want root and one racer", len(users))
	}
}

func testSettings(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	_, err := s.GetSetting(ctx, "session_key")
	wantErr(t, err, store.ErrNotFound, "GetSetting of an unset key")
	for _, v := range []string{"first", "second ✓"} {
		if err := s.SetSetting(ctx, "session_key", v); err != nil {
			t.Fatal(err)
		}
		if got := must(s.GetSetting(ctx, "session_key"))(t); got != v {
			t.Fatalf("GetSetting = %q, want %q", got, v)
		}
	}
}

func testConversations(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	a := newConv(t, s, "ana", "first")
	if a.ID == "" || a.Status != store.StatusIdle || a.LastSeq != 0 || a.CreatedAt.IsZero() || !a.UpdatedAt.Equal(a.CreatedAt) {
		t.Fatalf("CreateConversation defaults: %+v", a)
	}
	b := must(s.CreateConversation(ctx, store.Conversation{ID: "conv-b", OwnerID: "ana", Title: "second", LastSeq: 42}))(t)
	if b.ID != "conv-b" || b.LastSeq != 0 {
		t.Fatalf("CreateConversation = %+v, want the caller's id and LastSeq 0", b)
	}
	_, err := s.CreateConversation(ctx, store.Conversation{ID: "conv-b", OwnerID: "bob"})
	wantErr(t, err, store.ErrConflict, "CreateConversation with a taken id")
	c := newConv(t, s, "bob", "bob's")
	if got := must(s.GetConversation(ctx, a.ID))(t); got != a {
		t.Fatalf("GetConversation = %+v, want %+v", got, a)
	}
	_, err = s.GetConversation(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "GetConversation of a missing one")

	ids := func(cs []store.Conversation) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	if got := ids(must(s.ListConversations(ctx, "ana"))(t)); !slices.Equal(got, []string{b.ID, a.ID}) {
		t.Fatalf("ListConversations(ana) = %v, want newest first [%s %s]", got, b.ID, a.ID)
	}
	// Appending to the older conversation makes it the most recent.
	must(s.Append(ctx, a.ID, 0, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{"text":"hi"}`)}, Status: store.StatusGenerating}))(t)
	if got := ids(must(s.ListConversations(ctx, "ana"))(t)); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Fatalf("ListConversations(ana) after an append to %s = %v", a.ID, got)
	}
	if got := ids(must(s.ListConversations(ctx, ""))(t)); len(got) != 3 {
		t.Fatalf("ListConversations(\"\") = %v, want all 3", got)
	}
	must(s.Append(ctx, c.ID, 0, store.Batch{Status: store.StatusAwaiting}))(t)
	active := must(s.ListActive(ctx))(t)
	if got := ids(active); !slices.Equal(got, []string{a.ID, c.ID}) {
		t.Fatalf("ListActive = %v, want [%s %s]", got, a.ID, c.ID)
	}
	if active[0].Status != store.StatusGenerating || active[0].LastSeq != 1 || active[1].Status != store.StatusAwaiting {
		t.Fatalf("ListActive rows = %+v", active)
	}
	// A batch without Status keeps the status; an idle status drops it from ListActive.
	must(s.Append(ctx, a.ID, 1, store.Batch{Entries: []store.Entry{entry(store.EntryAssistantMessage, "", `{}`)}}))(t)
	if got := must(s.GetConversation(ctx, a.ID))(t); got.Status != store.StatusGenerating || got.LastSeq != 2 {
		t.Fatalf("after an append without status: %+v", got)
	}
	must(s.Append(ctx, a.ID, 2, store.Batch{Status: store.StatusIdle}))(t)
	if got := ids(must(s.ListActive(ctx))(t)); !slices.Equal(got, []string{c.ID}) {
		t.Fatalf("ListActive after idling %s = %v", a.ID, got)
	}
}

func testAppendAndLog(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "log")
	b := store.Batch{Entries: []store.Entry{
		{Type: store.EntryUserMessage, Actor: "ana", Data: json.RawMessage(`{"text":"send it"}`)},
		{Type: store.EntryAssistantMessage, Actor: "model", Data: json.RawMessage(`{"text":"ok","calls":["c1"]}`)},
		{Type: store.EntryToolCall, ToolCallID: "c1", Actor: "model", Data: json.RawMessage(`{"name":"x"}`)},
	}}
	if last := must(s.Append(ctx, c.ID, 0, b))(t); last != 3 {
		t.Fatalf("Append returned %d, want 3", last)
	}
	if last := must(s.Append(ctx, c.ID, 3, store.Batch{Entries: []store.Entry{entry(store.EntryToolResult, "c1", `{"ok":true}`)}}))(t); last != 4 {
		t.Fatalf("second Append returned %d, want 4", last)
	}
	// A batch without entries checks the sequence and keeps it.
	if last := must(s.Append(ctx, c.ID, 4, store.Batch{Status: store.StatusIdle}))(t); last != 4 {
		t.Fatalf("empty Append returned %d, want 4", last)
	}
	for _, stale := range []int64{0, 3, 5} {
		_, err := s.Append(ctx, c.ID, stale, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)}})
		wantErr(t, err, store.ErrConflict, fmt.Sprintf("Append after %d when the log is at 4", stale))
	}
	_, err := s.Append(ctx, "nope", 0, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)}})
	wantErr(t, err, store.ErrNotFound, "Append to a missing conversation")
	// Data that is not JSON is refused, with nothing of the batch written.
	if _, err := s.Append(ctx, c.ID, 4, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`), entry(store.EntryUserMessage, "", `{"text":"hello`)}}); err == nil {
		t.Fatal("Append of data that is not JSON succeeded")
	}

	log := must(s.Log(ctx, c.ID, 0))(t)
	if len(log) != 4 {
		t.Fatalf("Log has %d entries, want 4 (failed appends must add nothing)", len(log))
	}
	for i, e := range log {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has Seq %d: not gap-free", i, e.Seq)
		}
		if e.CreatedAt.IsZero() || e.CreatedAt.Location() != time.UTC {
			t.Fatalf("entry %d CreatedAt = %v, want a UTC time", i, e.CreatedAt)
		}
	}
	if e := log[0]; e.Type != store.EntryUserMessage || e.Actor != "ana" || string(e.Data) != `{"text":"send it"}` || e.ToolCallID != "" {
		t.Fatalf("entry 1 = %+v", e)
	}
	if e := log[2]; e.Type != store.EntryToolCall || e.ToolCallID != "c1" {
		t.Fatalf("entry 3 = %+v", e)
	}
	tail := must(s.Log(ctx, c.ID, 2))(t)
	if len(tail) != 2 || tail[0].Seq != 3 || tail[1].Seq != 4 {
		t.Fatalf("Log after 2 = %+v", tail)
	}
	if got := must(s.Log(ctx, c.ID, 4))(t); len(got) != 0 {
		t.Fatalf("Log after the last entry = %+v", got)
	}
	_, err = s.Log(ctx, "nope", 0)
	wantErr(t, err, store.ErrNotFound, "Log of a missing conversation")
	if got := must(s.GetConversation(ctx, c.ID))(t); got.LastSeq != 4 {
		t.Fatalf("LastSeq = %d, want 4", got.LastSeq)
	}
	// An entry without data round-trips as empty.
	must(s.Append(ctx, c.ID, 4, store.Batch{Entries: []store.Entry{{Type: store.EntryExpiry, ToolCallID: "c1", Actor: "system"}}}))(t)
	if got := must(s.Log(ctx, c.ID, 4))(t); len(got) != 1 || len(got[0].Data) != 0 {
		t.Fatalf("entry without data = %+v", got)
	}
}

// testLogPages: LogPage reads the log a page at a time: read page after page from where the
// last one ended, a log several pages long comes whole, in order, without a duplicate; a short
// page says the log ends; a page stops at the entry whose data reach maxBytes (at least one
// entry, however large); an unknown conversation is ErrNotFound; a limit or a byte bound that is
// not positive is refused.
func testLogPages(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "pages")
	const n, page = 23, 5
	var last int64
	for i := range n {
		last = must(s.Append(ctx, c.ID, last, store.Batch{Entries: []store.Entry{
			entry(store.EntryUserMessage, "", fmt.Sprintf(`{"text":"m%d"}`, i+1)),
		}}))(t)
	}
	var got []store.Entry
	after, reads := int64(0), 0
	for {
		es := must(s.LogPage(ctx, c.ID, after, page, 1<<20))(t)
		reads++
		if len(es) > page {
			t.Fatalf("a page of %d holds %d entries", page, len(es))
		}
		got = append(got, es...)
		if len(es) < page {
			break
		}
		after = es[len(es)-1].Seq
	}
	if len(got) != n || reads != n/page+1 {
		t.Fatalf("read %d entries in %d pages, want %d in %d", len(got), reads, n, n/page+1)
	}
	for i, e := range got {
		if e.Seq != int64(i+1) || string(e.Data) != fmt.Sprintf(`{"text":"m%d"}`, i+1) {
			t.Fatalf("entry %d of the pages = seq %d %s", i, e.Seq, e.Data)
		}
	}
	if es := must(s.LogPage(ctx, c.ID, 20, page, 1<<20))(t); len(es) != 3 || es[0].Seq != 21 {
		t.Fatalf("the last page = %+v, want 21..23", es)
	}
	// The first entries' data are 13 bytes each: a bound of 30 bytes ends the page at the third.
	if es := must(s.LogPage(ctx, c.ID, 0, page, 30))(t); len(es) != 3 || es[2].Seq != 3 {
		t.Fatalf("a page of at most 30 bytes = %d entries, want 3", len(es))
	}
	if es := must(s.LogPage(ctx, c.ID, 0, page, 1))(t); len(es) != 1 || es[0].Seq != 1 {
		t.Fatalf("a page of at most 1 byte = %d entries, want the first alone", len(es))
	}
	_, err := s.LogPage(ctx, "nope", 0, page, 1<<20)
	wantErr(t, err, store.ErrNotFound, "LogPage of a missing conversation")
	if _, err := s.LogPage(ctx, c.ID, 0, 0, 1<<20); err == nil {
		t.Fatal("LogPage with limit 0 succeeded")
	}
	if _, err := s.LogPage(ctx, c.ID, 0, page, 0); err == nil {
		t.Fatal("LogPage with maxBytes 0 succeeded")
	}
}

// race has n appenders write after the same sequence at once and reports how many won.
func race(t *testing.T, handles []store.Store, convID string, after int64, n int) (wins int) {
	t.Helper()
	ctx := ctxT(t)
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := handles[i%len(handles)].Append(ctx, convID, after, store.Batch{
				Entries: []store.Entry{entry(store.EntryUserMessage, "", fmt.Sprintf(`{"writer":%d}`, i))},
				Calls:   []store.ToolCall{{ToolCallID: fmt.Sprintf("w%d-%d", after, i), Status: store.CallRunning}},
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, store.ErrConflict):
		default:
			t.Fatalf("racing Append: %v", err)
		}
	}
	return wins
}

func checkRaceLog(t *testing.T, s store.Store, convID string, rounds int) {
	t.Helper()
	log := must(s.Log(ctxT(t), convID, 0))(t)
	if len(log) != rounds {
		t.Fatalf("log has %d entries after %d races, want exactly one per race", len(log), rounds)
	}
	calls := must(s.ToolCalls(ctxT(t), convID))(t)
	if len(calls) != rounds {
		t.Fatalf("%d tool_calls rows after %d races: a losing batch left rows", len(calls), rounds)
	}
}

func testAppendRace(t *testing.T, open Opener) {
	s := open(t)
	c := newConv(t, s, "ana", "race")
	const rounds = 20
	for i := range rounds {
		if wins := race(t, []store.Store{s}, c.ID, int64(i), 2); wins != 1 {
			t.Fatalf("round %d: %d of 2 racing appends won, want exactly 1", i, wins)
		}
	}
	checkRaceLog(t, s, c.ID, rounds)
}

func testAppendRaceTwoHandles(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	c := newConv(t, a, "ana", "race")
	const rounds = 10
	for i := range rounds {
		if wins := race(t, []store.Store{a, b}, c.ID, int64(i), 4); wins != 1 {
			t.Fatalf("round %d: %d of 4 racing appends on two handles won, want exactly 1", i, wins)
		}
	}
	checkRaceLog(t, b, c.ID, rounds)
}

// snapshot is everything a batch can change, for before/after comparisons.
type snapshot struct {
	Conv   store.Conversation
	Log    []store.Entry
	Calls  []store.ToolCall
	Steps  []store.Step
	Audit  []store.AuditRecord
	Claims []store.Expiry
}

func snap(t *testing.T, s store.Store, convID string) snapshot {
	t.Helper()
	ctx := ctxT(t)
	return snapshot{
		Conv:  must(s.GetConversation(ctx, convID))(t),
		Log:   must(s.Log(ctx, convID, 0))(t),
		Calls: must(s.ToolCalls(ctx, convID))(t),
		Steps: must(s.Steps(ctx, convID))(t),
		Audit: must(s.ListAudit(ctx, store.AuditFilter{ConversationID: convID}))(t),
	}
}

// atomicBase is the time the atomicity tests schedule timers at.
var atomicBase = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// atomicSetup gives c a first batch that every later batch of the atomicity tests changes: an
// awaiting call c1 with a timer, a step and an audit record. It returns the log's sequence.
func atomicSetup(t *testing.T, s store.Store, convID string) int64 {
	t.Helper()
	setup := callBatch("c1")
	setup.Status = store.StatusAwaiting
	setup.Schedule = []store.Expiry{{ToolCallID: "c1", At: atomicBase}}
	setup.Steps = []store.Step{{Key: "tool:c1", Attempts: 1}}
	setup.Audit = []store.AuditRecord{{ToolCallID: "c1", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "aa"}}
	return must(s.Append(ctxT(t), convID, 0, setup))(t)
}

// atomicBig touches every part of the store a batch can: two entries, two calls, the status, a
// timer scheduled and one cancelled, a step upserted and one done, an audit record.
func atomicBig() store.Batch {
	return store.Batch{
		Entries: []store.Entry{
			entry(store.EntryDecision, "c1", `{"approved":true}`),
			entry(store.EntryToolCall, "c2", `{}`),
		},
		Calls: []store.ToolCall{
			{ToolCallID: "c1", Status: store.CallResolved},
			{ToolCallID: "c2", Status: store.CallAwaiting, PendingKind: "approval"},
		},
		Status:    store.StatusIdle,
		Schedule:  []store.Expiry{{ToolCallID: "c2", At: atomicBase}},
		Cancel:    []string{"c1"},
		Steps:     []store.Step{{Key: "tool:c2", Attempts: 3}},
		DoneSteps: []string{"tool:c1"},
		Audit:     []store.AuditRecord{{ToolCallID: "c1", Tool: "send_email", ActorID: "bob", Action: "deny", ArgsHash: "bb"}},
	}
}

// checkUnchanged fails the test when the store differs from before, timers included: c1 is
// still scheduled at atomicBase and no c2 timer exists.
func checkUnchanged(t *testing.T, s store.Store, convID string, before snapshot, what string) {
	t.Helper()
	if after := snap(t, s, convID); !equalJSON(t, before, after) {
		t.Fatalf("%s: a failed batch changed the store\nbefore: %+v\nafter:  %+v", what, before, after)
	}
	claimed := must(s.ClaimDueExpiries(ctxT(t), atomicBase.Add(time.Hour), time.Nanosecond, 10))(t)
	if len(claimed) != 1 || claimed[0].ToolCallID != "c1" {
		t.Fatalf("%s: timers after the failed batch = %+v, want only c1", what, claimed)
	}
}

// checkBigApplied fails the test unless atomicBig was applied whole after atomicSetup.
func checkBigApplied(t *testing.T, s store.Store, convID string) {
	t.Helper()
	after := snap(t, s, convID)
	if after.Conv.Status != store.StatusIdle || len(after.Log) != 3 || len(after.Calls) != 2 || len(after.Audit) != 2 ||
		len(after.Steps) != 1 || after.Steps[0].Key != "tool:c2" {
		t.Fatalf("after the good batch: %+v", after)
	}
	claimed := must(s.ClaimDueExpiries(ctxT(t), atomicBase.Add(2*time.Hour), time.Minute, 10))(t)
	if len(claimed) != 1 || claimed[0].ToolCallID != "c2" || claimed[0].ConversationID != convID {
		t.Fatalf("timers after the good batch = %+v, want only c2", claimed)
	}
}

func testBatchAtomicity(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "atomic")
	last := atomicSetup(t, s, c.ID)
	before := snap(t, s, c.ID)
	big := atomicBig()
	cases := []struct {
		name  string
		after int64
		b     store.Batch
		want  error
	}{
		{"stale sequence", last - 1, big, store.ErrConflict},
		{"future sequence", last + 1, big, store.ErrConflict},
		// The same call logged twice: the tool_call entry for c1 exists, so the batch fails at
		// its entries (FailedLastStatement fails one after every row was written).
		{"duplicate tool call id", last, func() store.Batch {
			b := big
			b.Entries = append(slices.Clone(big.Entries), entry(store.EntryToolCall, "c1", `{}`))
			return b
		}(), store.ErrConflict},
		{"duplicate tool call id within the batch", last, func() store.Batch {
			b := big
			b.Entries = append(slices.Clone(big.Entries), entry(store.EntryToolCall, "c2", `{}`))
			return b
		}(), store.ErrConflict},
	}
	for _, tc := range cases {
		_, err := s.Append(ctx, c.ID, tc.after, tc.b)
		wantErr(t, err, tc.want, tc.name)
		checkUnchanged(t, s, c.ID, before, tc.name)
	}
	// The same batch at the right sequence applies whole.
	if got := must(s.Append(ctx, c.ID, last, big))(t); got != last+2 {
		t.Fatalf("Append = %d, want %d", got, last+2)
	}
	checkBigApplied(t, s, c.ID)
}

// testFailedLastStatement fails a batch inside the database at its audit insert — after its
// sequence check, entries, calls, timers and steps were written — and checks that none of it
// stays: a store that committed part of a batch, or ran its statements outside one transaction,
// fails here.
func testFailedLastStatement(t *testing.T, open Opener, failAudit func(t *testing.T, s store.Store, action string)) {
	if failAudit == nil {
		t.Fatal("storetest.Run needs WithFailingAudit: without it a batch that fails after its first writes is never tried")
	}
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "atomic")
	last := atomicSetup(t, s, c.ID)
	before := snap(t, s, c.ID)
	failAudit(t, s, "refused-by-trigger")
	bad := atomicBig()
	bad.Audit = append(slices.Clone(bad.Audit), store.AuditRecord{ToolCallID: "c2", Tool: "send_email", ActorID: "bob", Action: "refused-by-trigger"})
	if _, err := s.Append(ctx, c.ID, last, bad); err == nil {
		t.Fatal("Append of a batch whose audit insert the database refuses succeeded")
	}
	checkUnchanged(t, s, c.ID, before, "batch refused at its audit insert")
	// The failed batch did not take the sequence: the batch without the refused record applies.
	if got := must(s.Append(ctx, c.ID, last, atomicBig()))(t); got != last+2 {
		t.Fatalf("Append after the refused batch = %d, want %d", got, last+2)
	}
	checkBigApplied(t, s, c.ID)
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja := must(json.Marshal(a))(t)
	jb := must(json.Marshal(b))(t)
	return bytes.Equal(ja, jb)
}

func testLargeAndUnicode(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	title := "Ünïcødé 🚀 — 日本語 « test » \u200d"
	c := newConv(t, s, "ана", title)
	big := make([]byte, 0, 1<<20+64)
	big = append(big, `{"text":"`...)
	for len(big) < 1<<20 {
		big = append(big, "0123456789abcdef"...)
	}
	big = append(big, `"}`...)
	uni := json.RawMessage(`{"text":"héllo wörld 👋🏽 ∑ 中文 \u0000 \"quoted\" \\ back","emoji":"🏳️‍🌈"}`)
	b := store.Batch{Entries: []store.Entry{
		{Type: store.EntryToolResult, ToolCallID: "c-🔧", Actor: "ана", Data: big},
		{Type: store.EntryUserMessage, Actor: "ана", Data: uni},
	}, Calls: []store.ToolCall{{ToolCallID: "c-🔧", Name: "ツール", Status: store.CallResolved, Result: big, Args: uni}}}
	must(s.Append(ctx, c.ID, 0, b))(t)
	log := must(s.Log(ctx, c.ID, 0))(t)
	if len(log) != 2 || !bytes.Equal(log[0].Data, big) || log[0].ToolCallID != "c-🔧" || log[0].Actor != "ана" {
		t.Fatalf("1 MB entry did not round-trip (got %d entries, first %d bytes)", len(log), len(log[0].Data))
	}
	if !bytes.Equal(log[1].Data, uni) {
		t.Fatalf("Unicode entry = %s, want %s", log[1].Data, uni)
	}
	tc := must(s.GetToolCall(ctx, c.ID, "c-🔧"))(t)
	if tc.Name != "ツール" || !bytes.Equal(tc.Result, big) || !bytes.Equal(tc.Args, uni) {
		t.Fatalf("tool call with Unicode and 1 MB result did not round-trip")
	}
	if got := must(s.GetConversation(ctx, c.ID))(t); got.Title != title || got.OwnerID != "ана" {
		t.Fatalf("conversation = %q by %q", got.Title, got.OwnerID)
	}
}

func testTimestamps(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "time")
	at := time.Date(2031, 2, 3, 4, 5, 6, 123456789, time.FixedZone("X", 5*3600))
	want := at.UTC().Truncate(time.Microsecond)
	must(s.Append(ctx, c.ID, 0, store.Batch{
		Calls:  []store.ToolCall{{ToolCallID: "c1", Status: store.CallAwaiting, ExpiresAt: &at, CreatedAt: at}},
		Steps:  []store.Step{{Key: "llm:1", NextAttemptAt: &at}},
		Audit:  []store.AuditRecord{{ToolCallID: "c1", Action: "approve", At: at}},
		Status: store.StatusAwaiting,
	}))(t)
	check := func(what string, got time.Time) {
		t.Helper()
		if !got.Equal(want) || got.Location() != time.UTC {
			t.Fatalf("%s = %v (%v), want %v in UTC with microsecond precision", what, got, got.Location(), want)
		}
	}
	tc := must(s.GetToolCall(ctx, c.ID, "c1"))(t)
	check("ToolCall.ExpiresAt", *tc.ExpiresAt)
	check("ToolCall.CreatedAt", tc.CreatedAt)
	check("Step.NextAttemptAt", *must(s.Steps(ctx, c.ID))(t)[0].NextAttemptAt)
	check("AuditRecord.At", must(s.ListAudit(ctx, store.AuditFilter{ConversationID: c.ID}))(t)[0].At)
	if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: "c1", At: at}); err != nil {
		t.Fatal(err)
	}
	check("Expiry.At", must(s.ClaimDueExpiries(ctx, want, time.Minute, 1))(t)[0].At)
	for _, tm := range []time.Time{tc.UpdatedAt, must(s.GetConversation(ctx, c.ID))(t).UpdatedAt} {
		if tm.Location() != time.UTC || !tm.Equal(tm.Truncate(time.Microsecond)) {
			t.Fatalf("store-stamped time %v is not UTC microseconds", tm)
		}
	}
}

func testToolCallsUpsert(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "calls")
	_, err := s.GetToolCall(ctx, c.ID, "c1")
	wantErr(t, err, store.ErrNotFound, "GetToolCall of a missing call")
	b := callBatch("c1", "c2")
	b.Entries = append([]store.Entry{entry(store.EntryAssistantMessage, "", `{}`)}, b.Entries...)
	exp := time.Date(2030, 5, 5, 0, 0, 0, 0, time.UTC)
	b.Calls[0].ExpiresAt = &exp
	b.Calls[0].Prompt = json.RawMessage(`{"plan":"send"}`)
	must(s.Append(ctx, c.ID, 0, b))(t)
	c1 := must(s.GetToolCall(ctx, c.ID, "c1"))(t)
	if c1.Seq != 2 || c1.Name != "send_email" || c1.Executor != "server" || c1.Approval != "always" || c1.Approvers != "owner" ||
		c1.Status != store.CallAwaiting || c1.PendingKind != "approval" || string(c1.Args) != `{"to":"a@example.com"}` ||
		string(c1.Prompt) != `{"plan":"send"}` || len(c1.Result) != 0 || c1.ExpiresAt == nil || !c1.ExpiresAt.Equal(exp) || c1.ConversationID != c.ID {
		t.Fatalf("GetToolCall = %+v (Seq should come from its tool_call entry, 2)", c1)
	}
	// The update: a whole row with Seq 0 and a new status keeps Seq and CreatedAt.
	upd := c1
	upd.Seq, upd.CreatedAt = 0, time.Time{}
	upd.Status, upd.PendingKind, upd.Prompt, upd.ExpiresAt = store.CallResolved, "", nil, nil
	upd.Result = json.RawMessage(`{"ok":true}`)
	must(s.Append(ctx, c.ID, 3, store.Batch{Entries: []store.Entry{entry(store.EntryToolResult, "c1", `{"ok":true}`)}, Calls: []store.ToolCall{upd}}))(t)
	got := must(s.GetToolCall(ctx, c.ID, "c1"))(t)
	if got.Seq != 2 || !got.CreatedAt.Equal(c1.CreatedAt) || !got.UpdatedAt.After(c1.UpdatedAt) || got.Status != store.CallResolved ||
		got.PendingKind != "" || got.Prompt != nil || got.ExpiresAt != nil || string(got.Result) != `{"ok":true}` || got.Name != "send_email" {
		t.Fatalf("after upsert = %+v", got)
	}
	calls := must(s.ToolCalls(ctx, c.ID))(t)
	if len(calls) != 2 || calls[0].ToolCallID != "c1" || calls[1].ToolCallID != "c2" || calls[1].Seq != 3 {
		t.Fatalf("ToolCalls = %+v, want c1 then c2 in log order", calls)
	}
	// A call listed twice in one batch takes its last value.
	must(s.Append(ctx, c.ID, 4, store.Batch{Calls: []store.ToolCall{
		{ToolCallID: "c2", Status: store.CallRunning}, {ToolCallID: "c2", Status: store.CallErrored, Name: "send_email"},
	}}))(t)
	if got := must(s.GetToolCall(ctx, c.ID, "c2"))(t); got.Status != store.CallErrored || got.Seq != 3 {
		t.Fatalf("c2 after a double upsert = %+v", got)
	}
	other := newConv(t, s, "ana", "other")
	if got := must(s.ToolCalls(ctx, other.ID))(t); len(got) != 0 {
		t.Fatalf("another conversation's calls = %+v", got)
	}
}

func testListPending(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	ana := newConv(t, s, "ana", "ana's")
	bob := newConv(t, s, "bob", "bob's")
	type call struct {
		conv                    store.Conversation
		id, kind, approvers, st string
	}
	// In creation order; ListPending returns newest first.
	calls := []call{
		{ana, "a1", "approval", "owner", store.CallAwaiting},
		{ana, "a2", "approval", "reviewer", store.CallAwaiting},
		{bob, "b1", "elicitation", "owner", store.CallAwaiting},
		{bob, "b2", "approval", "reviewer", store.CallAwaiting},
		{ana, "a3", "client_exec", "", store.CallAwaiting},
		{ana, "a4", "", "", store.CallRunning},
		{bob, "b3", "", "reviewer", store.CallResolved},
		{bob, "b4", "", "", store.CallDenied},
	}
	seqs := map[string]int64{}
	for _, cl := range calls {
		seq := must(s.Append(ctx, cl.conv.ID, seqs[cl.conv.ID], store.Batch{
			Entries: []store.Entry{entry(store.EntryToolCall, cl.id, `{}`)},
			Calls:   []store.ToolCall{{ToolCallID: cl.id, Name: "t", Status: cl.st, PendingKind: cl.kind, Approvers: cl.approvers}},
		}))(t)
		seqs[cl.conv.ID] = seq
	}
	cases := []struct {
		f    store.PendingFilter
		want []string
	}{
		{store.PendingFilter{}, []string{"a3", "b2", "b1", "a2", "a1"}},
		{store.PendingFilter{Kind: "approval"}, []string{"b2", "a2", "a1"}},
		{store.PendingFilter{Kind: "elicitation"}, []string{"b1"}},
		{store.PendingFilter{Kind: "client_exec"}, []string{"a3"}},
		{store.PendingFilter{Approvers: "reviewer"}, []string{"b2", "a2"}},
		{store.PendingFilter{Kind: "approval", Approvers: "owner"}, []string{"a1"}},
		{store.PendingFilter{OwnerID: "ana"}, []string{"a3", "a2", "a1"}},
		{store.PendingFilter{OwnerID: "bob", Approvers: "reviewer"}, []string{"b2"}},
		{store.PendingFilter{OwnerID: "carol"}, nil},
		{store.PendingFilter{Limit: 2}, []string{"a3", "b2"}},
	}
	for _, tc := range cases {
		ps := must(s.ListPending(ctx, tc.f))(t)
		var got []string
		for _, p := range ps {
			got = append(got, p.ToolCallID)
			conv := ana
			if strings.HasPrefix(p.ToolCallID, "b") {
				conv = bob
			}
			if p.OwnerID != conv.OwnerID || p.Title != conv.Title || p.ConversationID != conv.ID || p.Status != store.CallAwaiting {
				t.Fatalf("ListPending(%+v) row %+v: wrong owner, title or conversation", tc.f, p)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("ListPending(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
	// Resolving a call removes it.
	must(s.Append(ctx, bob.ID, seqs[bob.ID], store.Batch{Calls: []store.ToolCall{{ToolCallID: "b2", Status: store.CallResolved}}}))(t)
	if ps := must(s.ListPending(ctx, store.PendingFilter{Approvers: "reviewer"}))(t); len(ps) != 1 || ps[0].ToolCallID != "a2" {
		t.Fatalf("ListPending after resolving b2 = %+v", ps)
	}
}

func testExpiries(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "timers")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"c1", "c2", "c3"} {
		if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: id, At: t0.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, s.ScheduleExpiry(ctx, store.Expiry{ConversationID: "nope", ToolCallID: "x", At: t0}), store.ErrNotFound,
		"ScheduleExpiry for a missing conversation")
	ids := func(es []store.Expiry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ToolCallID)
		}
		return out
	}
	if got := must(s.ClaimDueExpiries(ctx, t0.Add(-time.Second), time.Minute, 10))(t); len(got) != 0 {
		t.Fatalf("claimed before anything was due: %v", got)
	}
	// Replace c1's timer with a later one.
	if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: "c1", At: t0.Add(10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelExpiry(ctx, c.ID, "c3"); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelExpiry(ctx, c.ID, "c3"); err != nil {
		t.Fatalf("cancelling a missing timer: %v", err)
	}
	now := t0.Add(5 * time.Minute)
	got := must(s.ClaimDueExpiries(ctx, now, time.Minute, 10))(t)
	if !slices.Equal(ids(got), []string{"c2"}) || got[0].ConversationID != c.ID || !got[0].At.Equal(t0.Add(time.Minute)) {
		t.Fatalf("claim at +5m = %+v, want only c2 (c1 moved to +10m, c3 cancelled)", got)
	}
	if got := must(s.ClaimDueExpiries(ctx, now.Add(59*time.Second), time.Minute, 10))(t); len(got) != 0 {
		t.Fatalf("claimed again within the lease: %v", ids(got))
	}
	if got := must(s.ClaimDueExpiries(ctx, now.Add(time.Minute), time.Minute, 10))(t); !slices.Equal(ids(got), []string{"c2"}) {
		t.Fatalf("claim after the lease ran out = %v, want c2 again", ids(got))
	}
	// Rescheduling drops a claim.
	if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: "c2", At: t0}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(20 * time.Minute)
	if got := must(s.ClaimDueExpiries(ctx, later, time.Minute, 1))(t); !slices.Equal(ids(got), []string{"c2"}) {
		t.Fatalf("claim with limit 1 = %v, want the earliest, c2", ids(got))
	}
	if got := must(s.ClaimDueExpiries(ctx, later, time.Minute, 10))(t); !slices.Equal(ids(got), []string{"c1"}) {
		t.Fatalf("next claim = %v, want c1", ids(got))
	}
	if _, err := s.ClaimDueExpiries(ctx, later, 0, 10); err == nil {
		t.Fatal("a zero lease was accepted")
	}
}

func testExpiriesInBatch(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "batch timers")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	must(s.Append(ctx, c.ID, 0, store.Batch{Schedule: []store.Expiry{{ToolCallID: "c1", At: t0}, {ToolCallID: "c2", At: t0}}}))(t)
	// Cancel and Schedule in one batch: removals first, so c2 ends scheduled at the new time.
	must(s.Append(ctx, c.ID, 0, store.Batch{Cancel: []string{"c1", "c2"}, Schedule: []store.Expiry{{ToolCallID: "c2", At: t0.Add(time.Hour)}}}))(t)
	if got := must(s.ClaimDueExpiries(ctx, t0.Add(time.Minute), time.Minute, 10))(t); len(got) != 0 {
		t.Fatalf("claimed %+v; c1 was cancelled and c2 moved", got)
	}
	got := must(s.ClaimDueExpiries(ctx, t0.Add(time.Hour), time.Minute, 10))(t)
	if len(got) != 1 || got[0].ToolCallID != "c2" || got[0].ConversationID != c.ID {
		t.Fatalf("claimed %+v, want c2", got)
	}
}

func testClaimTwoHandles(t *testing.T, open Opener) {
	a, b := open(t), open(t)
	ctx := ctxT(t)
	c := newConv(t, a, "ana", "claims")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 60
	var sched []store.Expiry
	for i := range n {
		sched = append(sched, store.Expiry{ToolCallID: fmt.Sprintf("c%02d", i), At: t0.Add(time.Duration(i) * time.Second)})
	}
	must(a.Append(ctx, c.ID, 0, store.Batch{Schedule: sched}))(t)
	now := t0.Add(time.Hour)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 4)
	for w, h := range []store.Store{a, b, a, b} {
		wg.Go(func() {
			<-start
			for {
				got, err := h.ClaimDueExpiries(ctx, now, time.Hour, 3+w)
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, e := range got {
					seen[e.ToolCallID]++
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent claim: %v", err)
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct timers, want all %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("timer %s was claimed %d times within one lease, want once", id, k)
		}
	}
	// Once the lease runs out, every unfired timer is claimable again.
	if got := must(b.ClaimDueExpiries(ctx, now.Add(time.Hour), time.Hour, 1000))(t); len(got) != n {
		t.Fatalf("after the lease: %d claimable, want %d", len(got), n)
	}
}

func testExpiriesDueWhileDown(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "down")
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: "c1", At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// Claimed by the process that then died: the lease runs out while it is down.
	if got := must(s.ClaimDueExpiries(ctx, t0.Add(time.Minute), time.Minute, 10))(t); len(got) != 1 {
		t.Fatalf("first claim = %+v", got)
	}
	if err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: c.ID, ToolCallID: "c2", At: t0.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t)
	got := must(s2.ClaimDueExpiries(ctx, t0.Add(time.Hour), time.Minute, 10))(t)
	if len(got) != 2 || got[0].ToolCallID != "c1" || got[1].ToolCallID != "c2" {
		t.Fatalf("after reopening, claim = %+v, want c1 (lease ran out) and c2 (came due while down)", got)
	}
	if cv := must(s2.GetConversation(ctx, c.ID))(t); cv.Title != "down" {
		t.Fatalf("conversation after reopening = %+v", cv)
	}
}

func testSteps(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "steps")
	next := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	must(s.Append(ctx, c.ID, 0, store.Batch{Steps: []store.Step{
		{Key: "tool:c1", Attempts: 1, NextAttemptAt: &next, LastError: "timeout"},
		{Key: "llm:1", Attempts: 1},
	}}))(t)
	ss := must(s.Steps(ctx, c.ID))(t)
	if len(ss) != 2 || ss[0].Key != "llm:1" || ss[0].NextAttemptAt != nil || ss[1].Key != "tool:c1" || ss[1].Attempts != 1 ||
		!ss[1].NextAttemptAt.Equal(next) || ss[1].LastError != "timeout" || ss[1].ConversationID != c.ID || ss[1].UpdatedAt.IsZero() {
		t.Fatalf("Steps = %+v", ss)
	}
	must(s.Append(ctx, c.ID, 0, store.Batch{Steps: []store.Step{{Key: "tool:c1", Attempts: 2, LastError: "503"}}, DoneSteps: []string{"llm:1"}}))(t)
	ss = must(s.Steps(ctx, c.ID))(t)
	if len(ss) != 1 || ss[0].Key != "tool:c1" || ss[0].Attempts != 2 || ss[0].NextAttemptAt != nil || ss[0].LastError != "503" {
		t.Fatalf("Steps after upsert and done = %+v", ss)
	}
	other := newConv(t, s, "ana", "other")
	if ss := must(s.Steps(ctx, other.ID))(t); len(ss) != 0 {
		t.Fatalf("another conversation's steps = %+v", ss)
	}
}

func testOutbox(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c1 := newConv(t, s, "ana", "one")
	c2 := newConv(t, s, "ana", "two")
	m1 := must(s.AddOutbox(ctx, store.OutboxMessage{ConversationID: c1.ID, ToolCallID: "t1", To: "a@example.com", Subject: "Hi ✉", Body: "body"}))(t)
	if m1.ID == 0 || m1.CreatedAt.IsZero() || m1.Subject != "Hi ✉" {
		t.Fatalf("AddOutbox = %+v", m1)
	}
	again := must(s.AddOutbox(ctx, store.OutboxMessage{ConversationID: c1.ID, ToolCallID: "t1", To: "b@example.com", Subject: "other", Body: "x"}))(t)
	if again != m1 {
		t.Fatalf("second AddOutbox for the same call = %+v, want the first %+v", again, m1)
	}
	m2 := must(s.AddOutbox(ctx, store.OutboxMessage{ConversationID: c2.ID, ToolCallID: "t2", To: "c@example.com"}))(t)
	if _, err := s.AddOutbox(ctx, store.OutboxMessage{ConversationID: c2.ID}); err == nil {
		t.Fatal("AddOutbox without a tool call id was accepted")
	}
	if got := must(s.ListOutbox(ctx, c1.ID))(t); len(got) != 1 || got[0] != m1 {
		t.Fatalf("ListOutbox(c1) = %+v", got)
	}
	// Models reuse ids across conversations: the same id in another conversation is another
	// message, not the first one's answer.
	bob := newConv(t, s, "bob", "three")
	m3 := must(s.AddOutbox(ctx, store.OutboxMessage{ConversationID: bob.ID, ToolCallID: "t1", To: "d@example.com", Subject: "Bob's"}))(t)
	if m3.ID == m1.ID || m3.ConversationID != bob.ID || m3.To != "d@example.com" {
		t.Fatalf("Bob's call t1 = %+v: want its own row, not Ana's %+v", m3, m1)
	}
	if got := must(s.ListOutbox(ctx, ""))(t); len(got) != 3 || got[0] != m1 || got[1] != m2 || got[2] != m3 {
		t.Fatalf("ListOutbox(all) = %+v", got)
	}
}

func testAudit(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	c1 := newConv(t, s, "ana", "one")
	c2 := newConv(t, s, "bob", "two")
	must(s.Append(ctx, c1.ID, 0, store.Batch{Audit: []store.AuditRecord{
		{ToolCallID: "x1", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "h1"},
		{ToolCallID: "x2", Tool: "send_email", ActorID: "rev", Action: "deny", Reason: "no ✋", ArgsHash: "h2"},
	}}))(t)
	must(s.Append(ctx, c2.ID, 0, store.Batch{Audit: []store.AuditRecord{
		{ToolCallID: "y1", Tool: "form", ActorID: "rev", Action: "accept", ArgsHash: "h3"},
	}}))(t)
	actions := func(as []store.AuditRecord) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Action)
		}
		return out
	}
	cases := []struct {
		f    store.AuditFilter
		want []string
	}{
		{store.AuditFilter{}, []string{"accept", "deny", "approve"}},
		{store.AuditFilter{ConversationID: c1.ID}, []string{"deny", "approve"}},
		{store.AuditFilter{ActorID: "rev"}, []string{"accept", "deny"}},
		{store.AuditFilter{ConversationID: c1.ID, ActorID: "rev"}, []string{"deny"}},
		{store.AuditFilter{Limit: 1}, []string{"accept"}},
		{store.AuditFilter{ActorID: "nobody"}, nil},
	}
	for _, tc := range cases {
		if got := actions(must(s.ListAudit(ctx, tc.f))(t)); !slices.Equal(got, tc.want) {
			t.Fatalf("ListAudit(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
	deny := must(s.ListAudit(ctx, store.AuditFilter{ConversationID: c1.ID, ActorID: "rev"}))(t)[0]
	if deny.ID == 0 || deny.ConversationID != c1.ID || deny.ToolCallID != "x2" || deny.Tool != "send_email" || deny.Reason != "no ✋" ||
		deny.ArgsHash != "h2" || deny.At.IsZero() {
		t.Fatalf("audit record = %+v", deny)
	}
}

func testPing(t *testing.T, open Opener) {
	s := open(t)
	if err := s.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func testSchemaVersion(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	have, want, err := s.SchemaVersion(ctx)
	if err != nil || have != want || want < 1 {
		t.Fatalf("SchemaVersion of a store just opened = %d, %d, %v; want equal versions of at least 1", have, want, err)
	}
	if err := store.Ready(ctx, s); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Ready(ctx, s); err == nil {
		t.Fatal("Ready of a closed store = nil, want an error")
	}
}

func testUsage(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	day := time.Date(2026, 11, 24, 23, 30, 0, 0, time.UTC)
	if n := must(s.UsageOn(ctx, "ana", day))(t); n != 0 {
		t.Fatalf("usage of a day with none = %d", n)
	}
	for _, add := range []int64{120, 30} {
		if err := s.AddUsage(ctx, "ana", day, add); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddUsage(ctx, "bob", day, 7); err != nil {
		t.Fatal(err)
	}
	// The same UTC day, whatever the zone the time is in; the next day starts at zero.
	sameDay := day.In(time.FixedZone("east", 3*3600)) // already the 25th there
	if n := must(s.UsageOn(ctx, "ana", sameDay))(t); n != 150 {
		t.Fatalf("ana's usage = %d, want 150", n)
	}
	if n := must(s.UsageOn(ctx, "ana", day.Add(time.Hour)))(t); n != 0 {
		t.Fatalf("the next day's usage = %d, want 0", n)
	}
	if n := must(s.UsageOn(ctx, "bob", day))(t); n != 7 {
		t.Fatalf("bob's usage = %d, want 7", n)
	}
}

func testFirstAdmin(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	// Racing bootstraps make one admin.
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			_, err := s.CreateFirstAdmin(ctx, store.User{Name: fmt.Sprintf("boss%d", i), PasswordHash: []byte("h")})
			errs <- err
		}()
	}
	ok := 0
	for range 6 {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("a losing bootstrap: %v, want ErrConflict", err)
		}
	}
	users := must(s.ListUsers(ctx))(t)
	if ok != 1 || len(users) != 1 || users[0].Role != store.RoleAdmin {
		t.Fatalf("%d bootstraps went through, users %+v", ok, users)
	}
	// Once there are users (or were), no second bootstrap.
	if _, err := s.CreateFirstAdmin(ctx, store.User{Name: "late", PasswordHash: []byte("h")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a bootstrap on a store with users: %v", err)
	}
	s2 := open(t)
	must(s2.CreateUser(ctx, store.User{Name: "member", PasswordHash: []byte("h")}))(t)
	if _, err := s2.CreateFirstAdmin(ctx, store.User{Name: "late", PasswordHash: []byte("h")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a bootstrap after a user was added: %v", err)
	}
}

func testEndSessions(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	ana := must(s.CreateUser(ctx, store.User{Name: "ana", PasswordHash: []byte("old")}))(t)
	bob := must(s.CreateUser(ctx, store.User{Name: "bob", PasswordHash: []byte("h")}))(t)
	far := time.Now().Add(time.Hour)
	for _, sess := range []store.Session{
		{TokenHash: []byte("a1"), UserID: ana.ID, CSRF: "c", ExpiresAt: far},
		{TokenHash: []byte("a2"), UserID: ana.ID, CSRF: "c", ExpiresAt: far},
		{TokenHash: []byte("a3"), UserID: ana.ID, CSRF: "c", ExpiresAt: far},
		{TokenHash: []byte("b1"), UserID: bob.ID, CSRF: "c", ExpiresAt: far},
		{TokenHash: []byte("old"), UserID: bob.ID, CSRF: "c", ExpiresAt: time.Now().Add(-time.Hour)},
	} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if n := must(s.EndUserSessions(ctx, ana.ID, []byte("a2")))(t); n != 2 {
		t.Fatalf("ended %d of ana's other sessions, want 2", n)
	}
	if _, err := s.SessionByHash(ctx, []byte("a2")); err != nil {
		t.Fatalf("the kept session: %v", err)
	}
	if _, err := s.SessionByHash(ctx, []byte("a1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an ended session: %v", err)
	}
	if n := must(s.EndUserSessions(ctx, ana.ID, nil))(t); n != 1 {
		t.Fatalf("sign out everywhere ended %d, want 1", n)
	}
	if _, err := s.SessionByHash(ctx, []byte("b1")); err != nil {
		t.Fatalf("another user's session went: %v", err)
	}
	if n := must(s.PurgeSessions(ctx, time.Now()))(t); n != 1 {
		t.Fatalf("purged %d expired sessions, want 1", n)
	}
	later := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	if err := s.ExtendSession(ctx, []byte("b1"), later); err != nil {
		t.Fatal(err)
	}
	if got := must(s.SessionByHash(ctx, []byte("b1")))(t); !got.ExpiresAt.Equal(later) {
		t.Fatalf("extended to %v, want %v", got.ExpiresAt, later)
	}
	if err := s.ExtendSession(ctx, []byte("missing"), later); err != nil {
		t.Fatalf("extending a missing session: %v", err)
	}
	if err := s.SetPassword(ctx, ana.ID, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if u := must(s.UserByID(ctx, ana.ID))(t); string(u.PasswordHash) != "new" {
		t.Fatalf("password hash %q", u.PasswordHash)
	}
	if err := s.SetPassword(ctx, "nobody", []byte("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the password of nobody: %v", err)
	}
}

// testSignInAttempts: UpdateSignInAttempts is one atomic read-modify-write of several keys:
// counts made at once through two handles (two processes) are all kept; a key update returns
// with no failures is gone; the keys come to update in the caller's order; the sweep deletes
// the keys whose first try is before its time, and only those.
func testSignInAttempts(t *testing.T, open Opener) {
	s1, ctx := open(t), ctxT(t)
	s2 := open(t)
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	count := func(s store.Store, keys ...string) error {
		return s.UpdateSignInAttempts(ctx, keys, func(cur []store.SignInAttempts) []store.SignInAttempts {
			for i := range cur {
				if cur[i].Failures == 0 {
					cur[i].First = t0
				}
				cur[i].Failures++
				cur[i].Last = t0.Add(time.Duration(cur[i].Failures) * time.Second)
			}
			return cur
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, keys := s1, []string{"b", "a"}
			if i%2 == 1 {
				s, keys = s2, []string{"a", "c", "b"}
			}
			errs <- count(s, keys...)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var got []store.SignInAttempts
	must(0, s2.UpdateSignInAttempts(ctx, []string{"c", "a", "b", "none"}, func(cur []store.SignInAttempts) []store.SignInAttempts {
		got = slices.Clone(cur)
		cur[0] = store.SignInAttempts{} // c goes
		return cur
	}))(t)
	if got[0].Failures != 20 || got[1].Failures != 40 || got[2].Failures != 40 || got[3] != (store.SignInAttempts{}) {
		t.Fatalf("counts c, a, b, none = %+v, want 20, 40, 40 and none", got)
	}
	if !got[1].First.Equal(t0) || !got[1].Last.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("a = %+v, want first %v, last 40 s later", got[1], t0)
	}
	must(0, s1.UpdateSignInAttempts(ctx, []string{"c"}, func(cur []store.SignInAttempts) []store.SignInAttempts {
		if cur[0] != (store.SignInAttempts{}) {
			t.Errorf("c after it was cleared = %+v", cur[0])
		}
		return cur
	}))(t)
	if err := s1.UpdateSignInAttempts(ctx, []string{"d"}, func(cur []store.SignInAttempts) []store.SignInAttempts {
		return []store.SignInAttempts{{First: t0.Add(time.Hour), Last: t0.Add(time.Hour), Failures: 1}}
	}); err != nil {
		t.Fatal(err)
	}
	if n := must(s2.SweepSignInAttempts(ctx, t0.Add(time.Minute)))(t); n != 2 {
		t.Fatalf("the sweep deleted %d keys, want a and b", n)
	}
	must(0, s1.UpdateSignInAttempts(ctx, []string{"a", "d"}, func(cur []store.SignInAttempts) []store.SignInAttempts {
		if cur[0].Failures != 0 || cur[1].Failures != 1 {
			t.Errorf("after the sweep a, d = %+v, want none and 1", cur)
		}
		return cur
	}))(t)
}
