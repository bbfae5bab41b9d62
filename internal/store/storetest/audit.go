package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"parley/internal/store"
)

// AuditKey is the key a conformance opener gives every handle it opens (WithAuditKey), so that
// handles on one database link one chain.
var AuditKey = func() *store.AuditKey {
	k, err := store.NewAuditKey([]byte("storetest audit key: 32 bytes at least, not a secret"))
	if err != nil {
		panic(err)
	}
	return k
}()

// WithExec gives the suite exec, which runs a statement directly on the database behind s
// (PostgreSQL placeholders) and returns its error: the suite checks that the database refuses
// to change or delete an audit record.
func WithExec(exec func(t *testing.T, s store.Store, sql string, args ...any) error) Option {
	return func(c *suite) { c.exec = exec }
}

// WithTamper gives the suite tamper, which runs a statement on the database behind s with its
// audit table's append-only triggers out of the way, as whoever owns the database can
// (PostgreSQL placeholders; a failure fails t): the suite's attacks on the audit chain.
func WithTamper(tamper func(t *testing.T, s store.Store, sql string, args ...any)) Option {
	return func(c *suite) { c.tamper = tamper }
}

// keyed is what a store of either kind offers the suite about its audit chain.
type keyed interface {
	AuditKey() *store.AuditKey
	SetAuditAnchor(store.AuditAnchor)
}

func auditKey(t *testing.T, s store.Store) *store.AuditKey {
	t.Helper()
	k, ok := s.(keyed)
	if !ok {
		t.Fatalf("%T does not expose its audit key", s)
	}
	return k.AuditKey()
}

// anchors is an AuditAnchor that keeps every head it was given.
type anchors struct {
	mu    sync.Mutex
	heads []store.AuditHead
}

func (a *anchors) Anchor(h store.AuditHead) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.heads = append(a.heads, h)
}

// all checks every head's signature and returns them for verification.
func (a *anchors) all(t *testing.T, key *store.AuditKey) *store.Anchors {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out store.Anchors
	for _, h := range a.heads {
		if err := key.CheckHead(h); err != nil {
			t.Fatalf("the store's anchor %+v: %v", h, err)
		}
		out.Add(h)
	}
	return &out
}

func anchored(t *testing.T, s store.Store) *anchors {
	t.Helper()
	a := &anchors{}
	k, ok := s.(keyed)
	if !ok {
		t.Fatalf("%T takes no audit anchor", s)
	}
	k.SetAuditAnchor(a)
	return a
}

// verifyChain walks the whole chain in pages with s's key (and, when given, against anchor) and
// returns how many records it checked, or the first break.
func verifyChain(t *testing.T, s store.Store, anchors *store.Anchors) (int64, error) {
	t.Helper()
	v := store.ChainVerifier{Key: auditKey(t, s), Anchors: anchors}
	var after int64
	for {
		page, err := s.AuditChain(ctxT(t), after, 3) // small pages: paging is part of the test
		if err != nil {
			t.Fatalf("AuditChain: %v", err)
		}
		if len(page) == 0 {
			n, _ := v.Verified()
			return n, v.End()
		}
		for _, r := range page {
			if err := v.Next(r); err != nil {
				return 0, err
			}
			after = r.Seq
		}
	}
}

// wantBreak fails t unless err is a *store.ChainBreak at seq whose reason mentions about.
func wantBreak(t *testing.T, err error, seq int64, about, what string) {
	t.Helper()
	var br *store.ChainBreak
	if !errors.As(err, &br) || br.Seq != seq || !strings.Contains(br.Reason, about) {
		t.Fatalf("verify after %s = %v, want a break at record %d (%q)", what, err, seq, about)
	}
}

func testAuditChain(t *testing.T, open Opener, tamper func(t *testing.T, s store.Store, sql string, args ...any)) {
	if tamper == nil {
		t.Fatal("the suite needs WithTamper to tamper with a record")
	}
	s, ctx := open(t), ctxT(t)
	other := open(t) // a second process on the same database
	c1 := newConv(t, s, "ana", "one")
	must(s.Append(ctx, c1.ID, 0, store.Batch{Audit: []store.AuditRecord{
		{ToolCallID: "x1", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "h1", Detail: json.RawMessage(`{"rule":0, "b":"é"}`)},
		{ToolCallID: "x2", Tool: "send_email", ActorID: "rev", Action: "deny", Reason: "no ✋\nreally", ArgsHash: "h2"},
	}}))(t)
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "send_email", ActorID: "ana", Action: "grant_revoke", Detail: json.RawMessage(`{"grant_id":"g1"}`)}); err != nil {
		t.Fatalf("AppendAudit: %v", err)
	}
	// Concurrent writers on two handles, to distinct conversations: each record gets one place.
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		h := s
		if w%2 == 1 {
			h = other
		}
		conv := newConv(t, s, "ana", fmt.Sprint("w", w))
		wg.Go(func() {
			var seq int64
			for i := range each {
				_, err := h.Append(ctx, conv.ID, seq, store.Batch{
					Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
					Audit:   []store.AuditRecord{{ToolCallID: fmt.Sprint("c", i), Tool: "t", ActorID: "system", Action: "rule_allow", ArgsHash: "h"}},
				})
				if err != nil {
					errs <- err
					return
				}
				seq++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent append: %v", err)
	}
	want := int64(3 + writers*each)
	n, err := verifyChain(t, s, nil)
	if err != nil || n != want {
		t.Fatalf("verify = %d records, %v; want %d, intact", n, err, want)
	}
	recs := must(s.ListAudit(ctx, store.AuditFilter{Action: "approve"}))(t)
	if len(recs) != 1 || recs[0].Seq != 1 || recs[0].PrevHash != "" || recs[0].Hash == "" || recs[0].KeyID != auditKey(t, s).ID() ||
		string(recs[0].Detail) != `{"rule":0, "b":"é"}` {
		t.Fatalf("first record = %+v", recs)
	}
	if got := must(s.ListAudit(ctx, store.AuditFilter{Tool: "send_email", Limit: 2}))(t); len(got) != 2 || got[0].Action != "grant_revoke" {
		t.Fatalf("ListAudit by tool = %+v", got)
	}
	if got := must(s.ListAudit(ctx, store.AuditFilter{BeforeSeq: 3}))(t); len(got) != 2 || got[0].Seq != 2 {
		t.Fatalf("ListAudit before 3 = %+v", got)
	}
	// Another key does not verify the chain.
	other2, err := store.NewAuditKey([]byte(strings.Repeat("another key ", 3)))
	if err != nil {
		t.Fatal(err)
	}
	v := store.ChainVerifier{Key: other2}
	wantBreak(t, v.Next(must(s.AuditChain(ctx, 0, 1))(t)[0]), 1, "not the configured key", "verifying with another key")

	// Change a record's reason behind the store's back: verification names it.
	tamper(t, s, `UPDATE audit SET reason = $1 WHERE chain_seq = 2`, "fine by me")
	_, err = verifyChain(t, s, nil)
	wantBreak(t, err, 2, "do not match", "changing a record")
	// Remove a record: it is missing.
	tamper(t, s, `UPDATE audit SET reason = $1 WHERE chain_seq = 2`, "no ✋\nreally")
	tamper(t, s, `DELETE FROM audit WHERE chain_seq = 5`)
	_, err = verifyChain(t, s, nil)
	wantBreak(t, err, 5, "missing", "a deletion")
}

// testAuditAppendOnly: the database refuses to change or delete an audit record, whoever asks;
// deleting a conversation leaves its records, and the chain intact.
func testAuditAppendOnly(t *testing.T, open Opener, exec func(t *testing.T, s store.Store, sql string, args ...any) error) {
	if exec == nil {
		t.Fatal("the suite needs WithExec")
	}
	s, ctx := open(t), ctxT(t)
	c := newConv(t, s, "ana", "doomed")
	must(s.Append(ctx, c.ID, 0, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Audit:   []store.AuditRecord{{ToolCallID: "x1", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "h1"}},
	}))(t)
	for _, q := range []string{
		`UPDATE audit SET actor_id = 'mallory' WHERE chain_seq = 1`,
		`UPDATE audit SET chain_seq = NULL`,
		`DELETE FROM audit WHERE chain_seq = 1`,
		`DELETE FROM audit`,
	} {
		err := exec(t, s, q)
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Fatalf("%s: err = %v, want the database's refusal", q, err)
		}
	}
	if err := s.DeleteConversation(ctx, c.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatalf("deleting a conversation with audit records: %v", err)
	}
	if got := must(s.ListAudit(ctx, store.AuditFilter{ConversationID: c.ID}))(t); len(got) != 2 || got[1].ActorID != "ana" {
		t.Fatalf("audit after the refused changes and the deletion = %+v", got)
	}
	if n, err := verifyChain(t, s, nil); err != nil || n != 2 {
		t.Fatalf("verify = %d, %v; want 2 records, intact", n, err)
	}
}

// auditFixture writes five records through each kind of writer, with s's anchor recording its
// heads, and returns the anchor.
func auditFixture(t *testing.T, s store.Store) *anchors {
	t.Helper()
	ctx := ctxT(t)
	a := anchored(t, s)
	c := newConv(t, s, "ana", "audited")
	must(s.Append(ctx, c.ID, 0, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Audit: []store.AuditRecord{
			{ToolCallID: "x1", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "h1"},
			{ToolCallID: "x2", Tool: "send_email", ActorID: "rev", Action: "deny", Reason: "no", ArgsHash: "h2"},
		},
	}))(t)
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "send_email", ActorID: "ana", Action: "grant_revoke"}); err != nil {
		t.Fatal(err)
	}
	must(s.Append(ctx, c.ID, 1, store.Batch{
		Entries: []store.Entry{entry(store.EntryUserMessage, "", `{}`)},
		Audit:   []store.AuditRecord{{ToolCallID: "x3", Tool: "send_email", ActorID: "rev", Action: "approve", ArgsHash: "h3"}},
	}))(t)
	if err := s.DeleteConversation(ctx, c.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatal(err)
	}
	all := a.all(t, auditKey(t, s))
	head := all.Newest()
	chain := must(s.AuditChain(ctx, 0, 0))(t)
	if all.Len() != 4 || head.Seq != 5 || len(chain) != 5 || head.Hash != chain[4].Hash || head.KeyID != auditKey(t, s).ID() || all.Legacy() != 0 {
		t.Fatalf("after 4 commits of 5 records the anchor has %d heads, the newest %+v; the chain ends %+v", all.Len(), head, chain[len(chain)-1])
	}
	if n, err := verifyChain(t, s, all); err != nil || n != 5 {
		t.Fatalf("verify against the anchor = %d, %v; want 5 records, intact", n, err)
	}
	return a
}

// testAuditTruncated: the newest records deleted leave a chain intact up to its new end; the
// anchor shows what is missing.
func testAuditTruncated(t *testing.T, open Opener, tamper func(t *testing.T, s store.Store, sql string, args ...any)) {
	s := open(t)
	a := auditFixture(t, s)
	tamper(t, s, `DELETE FROM audit WHERE chain_seq > 3`)
	if n, err := verifyChain(t, s, nil); err != nil || n != 3 {
		t.Fatalf("without an anchor, verify = %d, %v; want what is left (3 records) to verify", n, err)
	}
	_, err := verifyChain(t, s, a.all(t, auditKey(t, s)))
	wantBreak(t, err, 4, "the newest records were removed", "deleting the newest records")
	// The store goes on writing after the cut: the new head is anchored, and the anchors written
	// before the cut still name the records that were removed.
	if err := s.AppendAudit(ctxT(t), store.AuditRecord{Tool: "t", ActorID: "u", Action: "approve"}, store.AuditRecord{Tool: "t", ActorID: "u", Action: "deny"},
		store.AuditRecord{Tool: "t", ActorID: "u", Action: "approve"}); err != nil {
		t.Fatal(err)
	}
	if n, err := verifyChain(t, s, nil); err != nil || n != 6 {
		t.Fatalf("without an anchor, verify = %d, %v; want 6 records to verify", n, err)
	}
	_, err = verifyChain(t, s, a.all(t, auditKey(t, s)))
	wantBreak(t, err, 4, "the anchor written at", "deleting the newest records and writing more")
	// Everything gone.
	tamper(t, s, `DELETE FROM audit`)
	_, err = verifyChain(t, s, a.all(t, auditKey(t, s)))
	wantBreak(t, err, 1, "the newest records were removed", "deleting every record")
}

// rechain rewrites the records from place from on, with change applied to the one at from, and
// links them again with the unkeyed hash of the chain before it was keyed (store.AuditHash):
// what an attacker without the key can compute. Downgrade also clears their key_id, so they
// pass for records from before the chain was keyed.
func rechain(t *testing.T, s store.Store, tamper func(t *testing.T, s store.Store, sql string, args ...any), from int64, downgrade bool) {
	t.Helper()
	chain := must(s.AuditChain(ctxT(t), 0, 0))(t)
	prev := ""
	for _, r := range chain {
		if r.Seq < from {
			prev = r.Hash
			continue
		}
		if r.Seq == from {
			r.ActorID = "mallory"
		}
		if downgrade {
			r.KeyID = ""
		}
		r.PrevHash = prev
		r.Hash = store.AuditHash(prev, r)
		tamper(t, s, `UPDATE audit SET actor_id = $1, prev_hash = $2, hash = $3, key_id = $4 WHERE chain_seq = $5`, r.ActorID, r.PrevHash, r.Hash, r.KeyID, r.Seq)
		prev = r.Hash
	}
}

// testAuditRechained: a record changed and the chain's hashes computed again after it, the old
// way, without the key, is found, at the record changed.
func testAuditRechained(t *testing.T, open Opener, tamper func(t *testing.T, s store.Store, sql string, args ...any)) {
	for _, tc := range []struct {
		name      string
		from      int64
		downgrade bool
		anchor    bool
		about     string
	}{
		{"rehashed", 3, false, false, "keyed hash"},
		{"rehashed, anchored", 3, false, true, "keyed hash"},
		{"passed off as unkeyed", 3, true, false, "follows keyed records"},
		{"all passed off as unkeyed, anchored", 1, true, true, "only the first 0 records are"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			a := auditFixture(t, s)
			rechain(t, s, tamper, tc.from, tc.downgrade)
			var anchor *store.Anchors
			if tc.anchor {
				anchor = a.all(t, auditKey(t, s))
			}
			_, err := verifyChain(t, s, anchor)
			wantBreak(t, err, tc.from, tc.about, "rewriting the chain from record "+fmt.Sprint(tc.from))
		})
	}
	// The limit: a whole chain passed off as written before the chain was keyed verifies as
	// unkeyed without an anchor, which is why the anchor is there.
	s := open(t)
	auditFixture(t, s)
	rechain(t, s, tamper, 1, true)
	v := store.ChainVerifier{Key: auditKey(t, s)}
	for _, r := range must(s.AuditChain(ctxT(t), 0, 0))(t) {
		if err := v.Next(r); err != nil {
			t.Fatalf("an unkeyed chain without an anchor: %v", err)
		}
	}
	if v.Unkeyed() != 5 {
		t.Fatalf("unkeyed records = %d, want 5", v.Unkeyed())
	}
}
