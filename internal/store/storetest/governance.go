package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"parley/internal/store"
)

func testGrants(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	ana := must(s.CreateUser(ctx, store.User{Name: "ana", Role: store.RoleMember, PasswordHash: []byte("x")}))(t)
	bob := must(s.CreateUser(ctx, store.User{Name: "bob", Role: store.RoleMember, PasswordHash: []byte("x")}))(t)
	c1 := newConv(t, s, ana.ID, "one")
	c2 := newConv(t, s, ana.ID, "two")
	now := time.Now().UTC().Truncate(time.Second)
	const argsA, argsB = "hash-of-args-a", "hash-of-args-b"
	must(s.Append(ctx, c1.ID, 0, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Grants: []store.Grant{
			{ID: "g-conv", UserID: ana.ID, Tool: "send_email", Scope: store.GrantConversation, ToolCallID: "x1", CreatedBy: ana.ID, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
				ArgsScope: store.GrantArgsExact, ArgsHash: argsA},
			{ID: "g-old", UserID: ana.ID, Tool: "lookup", Scope: store.GrantUser, ToolCallID: "x2", CreatedBy: ana.ID, CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour),
				ArgsScope: store.GrantArgsAny},
		},
	}))(t)
	g := must(s.ActiveGrant(ctx, ana.ID, c1.ID, "send_email", argsA, now))(t)
	if g.ID != "g-conv" || g.ConversationID != c1.ID || g.Scope != store.GrantConversation || !g.ExpiresAt.Equal(now.Add(time.Hour)) || g.RevokedAt != nil ||
		g.ArgsScope != store.GrantArgsExact || g.ArgsHash != argsA {
		t.Fatalf("grant = %+v", g)
	}
	_, err := s.ActiveGrant(ctx, ana.ID, c1.ID, "send_email", argsB, now)
	wantErr(t, err, store.ErrNotFound, "an exact grant for other arguments")
	_, err = s.ActiveGrant(ctx, ana.ID, c1.ID, "send_email", "", now)
	wantErr(t, err, store.ErrNotFound, "an exact grant for no arguments hash")
	_, err = s.ActiveGrant(ctx, ana.ID, c2.ID, "send_email", argsA, now)
	wantErr(t, err, store.ErrNotFound, "a conversation grant in another conversation")
	_, err = s.ActiveGrant(ctx, bob.ID, c1.ID, "send_email", argsA, now)
	wantErr(t, err, store.ErrNotFound, "another user's grant")
	_, err = s.ActiveGrant(ctx, ana.ID, c1.ID, "lookup", argsA, now)
	wantErr(t, err, store.ErrNotFound, "an expired grant")
	_, err = s.ActiveGrant(ctx, ana.ID, c1.ID, "send_email", argsA, now.Add(time.Hour))
	wantErr(t, err, store.ErrNotFound, "a grant at its expiry")

	// An exact grant needs its hash; a grant of any arguments has none. The store refuses the
	// rest (the append writes nothing).
	for _, bad := range []store.Grant{
		{ID: "g-bad1", UserID: ana.ID, Tool: "t", Scope: store.GrantUser, CreatedBy: ana.ID, ExpiresAt: now.Add(time.Hour), ArgsScope: store.GrantArgsExact},
		{ID: "g-bad2", UserID: ana.ID, Tool: "t", Scope: store.GrantUser, CreatedBy: ana.ID, ExpiresAt: now.Add(time.Hour), ArgsScope: store.GrantArgsAny, ArgsHash: argsA},
		{ID: "g-bad3", UserID: ana.ID, Tool: "t", Scope: store.GrantUser, CreatedBy: ana.ID, ExpiresAt: now.Add(time.Hour)},
	} {
		if _, err := s.Append(ctx, c1.ID, 1, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)}, Grants: []store.Grant{bad}}); err == nil {
			t.Fatalf("a grant with args scope %q and hash %q was written", bad.ArgsScope, bad.ArgsHash)
		}
		_, err := s.GrantByID(ctx, bad.ID)
		wantErr(t, err, store.ErrNotFound, "a refused grant")
	}

	// A user grant of any arguments, made through Append in another conversation, covers every
	// conversation and every argument.
	must(s.Append(ctx, c2.ID, 0, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Grants: []store.Grant{{ID: "g-user", UserID: ana.ID, Tool: "lookup", Scope: store.GrantUser, ToolCallID: "y1", CreatedBy: ana.ID, CreatedAt: now.Add(time.Second), ExpiresAt: now.Add(time.Hour),
			ArgsScope: store.GrantArgsAny}},
	}))(t)
	for _, h := range []string{argsA, argsB, ""} {
		if g := must(s.ActiveGrant(ctx, ana.ID, c1.ID, "lookup", h, now.Add(2*time.Second)))(t); g.ID != "g-user" || g.ConversationID != c2.ID || g.ArgsScope != store.GrantArgsAny {
			t.Fatalf("user grant = %+v", g)
		}
	}
	list := must(s.ListGrants(ctx, ana.ID, now.Add(2*time.Second)))(t)
	if len(list) != 2 || list[0].ID != "g-user" || list[1].ID != "g-conv" || list[1].ArgsHash != argsA {
		t.Fatalf("ListGrants = %+v", list)
	}
	if got := must(s.ListGrants(ctx, bob.ID, now))(t); len(got) != 0 {
		t.Fatalf("bob's grants = %+v", got)
	}
	must(s.Append(ctx, c1.ID, 1, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Grants: []store.Grant{{ID: "g-bob", UserID: bob.ID, Tool: "lookup", Scope: store.GrantUser, ToolCallID: "z1", CreatedBy: bob.ID, CreatedAt: now.Add(2 * time.Second), ExpiresAt: now.Add(time.Hour),
			ArgsScope: store.GrantArgsExact, ArgsHash: argsB}},
	}))(t)
	all := must(s.AllGrants(ctx, now.Add(3*time.Second), 0))(t)
	if len(all) != 3 || all[0].ID != "g-bob" || all[0].UserID != bob.ID || all[1].ID != "g-user" || all[2].ID != "g-conv" {
		t.Fatalf("AllGrants = %+v", all)
	}
	if got := must(s.AllGrants(ctx, now.Add(3*time.Second), 1))(t); len(got) != 1 || got[0].ID != "g-bob" {
		t.Fatalf("AllGrants with a limit = %+v", got)
	}
	if g := must(s.GrantByID(ctx, "g-old"))(t); g.UserID != ana.ID || g.Tool != "lookup" || g.ArgsScope != store.GrantArgsAny {
		t.Fatalf("GrantByID of an expired grant = %+v", g)
	}

	audit := store.AuditRecord{Tool: "lookup", ActorID: ana.ID, Action: "grant_revoke", Detail: json.RawMessage(`{"grant_id":"g-user"}`)}
	wantErr(t, s.RevokeGrant(ctx, bob.ID, "g-user", now, audit), store.ErrNotFound, "revoking someone else's grant")
	if err := s.RevokeGrant(ctx, ana.ID, "g-user", now.Add(3*time.Second), audit); err != nil {
		t.Fatalf("RevokeGrant: %v", err)
	}
	wantErr(t, s.RevokeGrant(ctx, ana.ID, "g-user", now.Add(4*time.Second), audit), store.ErrNotFound, "revoking twice")
	_, err = s.ActiveGrant(ctx, ana.ID, c1.ID, "lookup", argsA, now.Add(4*time.Second))
	wantErr(t, err, store.ErrNotFound, "a revoked grant")
	if g := must(s.GrantByID(ctx, "g-user"))(t); g.RevokedAt == nil || !g.RevokedAt.Equal(now.Add(3*time.Second)) {
		t.Fatalf("GrantByID of a revoked grant = %+v", g)
	}
	if got := must(s.AllGrants(ctx, now.Add(4*time.Second), 0))(t); len(got) != 2 || got[0].ID != "g-bob" || got[1].ID != "g-conv" {
		t.Fatalf("AllGrants after a revocation = %+v", got)
	}
	if got := must(s.ListAudit(ctx, store.AuditFilter{Action: "grant_revoke"}))(t); len(got) != 1 || got[0].ActorID != ana.ID || got[0].Hash == "" {
		t.Fatalf("revocation audit = %+v", got)
	}
}

// testClaims: a claim is taken when the call is free, renewed by its holder, refused to another
// user while it lives (that user learns who holds it), taken over once it expired, released by
// its holder only, and listed while it lives — across two handles on one database.
func testClaims(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	other := open(t) // a second process on the same database
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	claim := func(st store.Store, user, call string, at time.Time) (store.Claim, error) {
		return st.ClaimCall(ctx, store.Claim{ConversationID: "c1", ToolCallID: call, UserID: user, ClaimedAt: at, ExpiresAt: at.Add(10 * time.Minute)})
	}
	got := must(claim(s, "rita", "k1", t0))(t)
	if got.UserID != "rita" || !got.ExpiresAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("ClaimCall = %+v", got)
	}
	held, err := claim(other, "sam", "k1", t0.Add(time.Minute))
	wantErr(t, err, store.ErrConflict, "another user's claim of a claimed call")
	if held.UserID != "rita" || !held.ExpiresAt.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("the refused claim names %+v, want rita's", held)
	}
	if got := must(claim(other, "rita", "k1", t0.Add(2*time.Minute)))(t); !got.ExpiresAt.Equal(t0.Add(12 * time.Minute)) {
		t.Fatalf("renewed claim = %+v", got)
	}
	must(claim(s, "sam", "k2", t0))(t)
	list := must(s.ListClaims(ctx, t0.Add(5*time.Minute)))(t)
	if len(list) != 2 || list[0].ToolCallID != "k2" || list[1].ToolCallID != "k1" || list[1].UserID != "rita" {
		t.Fatalf("ListClaims = %+v, want k2 (sam) then k1 (rita)", list)
	}
	// Only the holder releases; a release of nothing is no error.
	if err := other.ReleaseClaim(ctx, "c1", "k2", "rita"); err != nil {
		t.Fatal(err)
	}
	if err := other.ReleaseClaim(ctx, "c1", "k2", "sam"); err != nil {
		t.Fatal(err)
	}
	if list := must(s.ListClaims(ctx, t0.Add(5*time.Minute)))(t); len(list) != 1 || list[0].ToolCallID != "k1" {
		t.Fatalf("after sam's release: %+v", list)
	}
	// Expired: listed no more, and anyone may take it.
	if list := must(s.ListClaims(ctx, t0.Add(12*time.Minute)))(t); len(list) != 0 {
		t.Fatalf("an expired claim is listed: %+v", list)
	}
	if got := must(claim(other, "sam", "k1", t0.Add(13*time.Minute)))(t); got.UserID != "sam" {
		t.Fatalf("taking over an expired claim = %+v", got)
	}
	if _, err := s.ClaimCall(ctx, store.Claim{ConversationID: "c1", ToolCallID: "k3", UserID: "sam", ClaimedAt: t0, ExpiresAt: t0}); err == nil {
		t.Fatal("a claim that expires as it is taken was accepted")
	}
}

// testNotifyOutbox: notifications queued by an append (atomically with it: a refused append
// queues nothing) and by EnqueueNotify are claimed oldest first, each by one claimer at a time
// across two handles, retried later with their attempts counted, re-claimed when a lease runs
// out, and removed when completed.
func testNotifyOutbox(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	other := open(t)
	c := newConv(t, s, "ana", "n")
	must(s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{"text":"x"}`)},
		Notify: []store.NotifyMessage{{ID: "ntf_a", Payload: []byte(`{"type":"approval.requested","n":1}`)}}}))(t)
	if _, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Notify: []store.NotifyMessage{{ID: "ntf_lost", Payload: []byte(`{}`)}}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale append: %v", err)
	}
	time.Sleep(2 * time.Millisecond) // distinct stamps: "oldest first" is by time
	if err := other.EnqueueNotify(ctx, store.NotifyMessage{ID: "ntf_b", Payload: []byte(`{"n":2}`)}, store.NotifyMessage{ID: "ntf_c", Payload: []byte(`{"n":3}`)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second)
	first := must(s.ClaimNotify(ctx, now, time.Minute, 2))(t)
	if len(first) != 2 || first[0].ID != "ntf_a" || string(first[0].Payload) != `{"type":"approval.requested","n":1}` || first[1].ID != "ntf_b" {
		t.Fatalf("first claim = %+v", first)
	}
	second := must(other.ClaimNotify(ctx, now, time.Minute, 10))(t)
	if len(second) != 1 || second[0].ID != "ntf_c" {
		t.Fatalf("the other handle's claim = %+v, want ntf_c alone (the rest is leased)", second)
	}
	must(0, s.RetryNotify(ctx, "ntf_a", now.Add(time.Hour), "the receiver answered 503"))(t)
	// A released claim is due again at once, its attempts unchanged.
	must(0, other.ReleaseNotify(ctx, "ntf_c"))(t)
	if got := must(s.ClaimNotify(ctx, now, time.Minute, 10))(t); len(got) != 1 || got[0].ID != "ntf_c" || got[0].Attempts != 0 {
		t.Fatalf("after ntf_c was released: %+v, want ntf_c with no attempt counted", got)
	}
	must(0, s.CompleteNotify(ctx, "ntf_b"))(t)
	if got := must(other.ClaimNotify(ctx, now.Add(time.Minute+time.Second), time.Minute, 10))(t); len(got) != 1 || got[0].ID != "ntf_c" {
		t.Fatalf("after the leases ran out: %+v, want ntf_c (ntf_a waits for its retry, ntf_b is done)", got)
	}
	got := must(s.ClaimNotify(ctx, now.Add(2*time.Hour), time.Minute, 10))(t)
	if len(got) != 2 || got[1].ID != "ntf_a" || got[1].Attempts != 1 || got[1].LastError != "the receiver answered 503" {
		t.Fatalf("after the retry time: %+v, want ntf_c (due first) then ntf_a, retried once", got)
	}
	for _, m := range got {
		must(0, other.CompleteNotify(ctx, m.ID))(t)
	}
	if got := must(s.ClaimNotify(ctx, now.Add(3*time.Hour), time.Minute, 10))(t); len(got) != 0 {
		t.Fatalf("completed notifications are claimed again: %+v", got)
	}
}
