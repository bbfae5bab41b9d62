package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/storetest"
)

func TestOpenCreatesDirAndReopens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "dir", "parley.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "u1", Title: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "u1", Data: json.RawMessage(`{"text":"hello"}`)}}})
	if err != nil || seq != 1 {
		t.Fatalf("append = %d, %v", seq, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	es, err := s.Log(ctx, c.ID, 0)
	if err != nil || len(es) != 1 || string(es[0].Data) != `{"text":"hello"}` {
		t.Fatalf("log after reopen = %+v, %v", es, err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(ctx, `PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(ctx, path)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("open of a newer file: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestWithClockStampsAndExpires(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "parley.db"), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckClock(t, s, clk, t0)
}

func TestOpenRejectsUnusablePath(t *testing.T) {
	for _, p := range []string{"", filepath.Join(t.TempDir(), "a?mode=ro"), filepath.Join(t.TempDir(), "b#c")} {
		if s, err := Open(context.Background(), p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded; the DSN would be misread", p)
		}
	}
}

// TestReadyNamesSchemaDrift checks that store.Ready (the /readyz check) reports a file whose
// schema version is not the binary's.
func TestReadyNamesSchemaDrift(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, st := range []struct {
		version int
		want    error
	}{{schemaVersion, nil}, {schemaVersion + 1, store.ErrSchemaTooNew}, {0, store.ErrSchemaBehind}} {
		if _, err := s.DB.Exec(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, st.version)); err != nil {
			t.Fatal(err)
		}
		err := store.Ready(ctx, s)
		if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("at version %d: Ready = %v, want %v", st.version, err, st.want)
		}
	}
}

// TestUpgradeFromVersion1: a file written by the previous schema (outbox keyed by tool_call_id
// alone) is upgraded in place on open: its messages stay, and a second conversation may then
// reuse a tool_call_id.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ana, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "bob", Title: "b"})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := s.CreateUser(ctx, store.User{Name: "ana"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAPIToken(ctx, store.APIToken{UserID: owner.ID, Name: "old", Hash: []byte("old-token")}); err != nil {
		t.Fatal(err)
	}
	// A message logged before the search index existed is found after the upgrade.
	if _, err := s.Append(ctx, ana.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana",
		Data: []byte(`{"text":"an old message about zebras"}`)}}}); err != nil {
		t.Fatal(err)
	}
	// Put the file back at version 1: the old outbox table, holding one message; tokens without
	// scope or expiry, no invitations, no search index.
	for _, q := range []string{
		`ALTER TABLE conversations DROP COLUMN indexed_seq`,
		`DROP TRIGGER entries_search_ad`,
		`DROP TABLE message_search`,
		`DROP TABLE message_text`,
		`DROP TABLE invitations`,
		`DROP TABLE grants`,
		`DROP TABLE inbox_claims`,
		`DROP TABLE notify_outbox`,
		`DROP TABLE audit`,
		`CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, tool_call_id TEXT NOT NULL, tool TEXT NOT NULL,
			actor_id TEXT NOT NULL, action TEXT NOT NULL, reason TEXT NOT NULL, args_hash TEXT NOT NULL, at INTEGER NOT NULL)`,
		`CREATE INDEX audit_conversation ON audit (conversation_id, at)`,
		`CREATE INDEX audit_actor ON audit (actor_id, at)`,
		fmt.Sprintf(`INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at) VALUES ('%s', 'call_0', 't', 'u', 'approve', '', 'h', 0)`, ana.ID),
		`ALTER TABLE api_tokens DROP COLUMN scope`,
		`ALTER TABLE api_tokens DROP COLUMN expires_at`,
		`DROP TABLE usage`,
		`DROP TABLE outbox`,
		`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, tool_call_id TEXT NOT NULL UNIQUE,
			to_addr TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, created_at INTEGER NOT NULL)`,
		`CREATE INDEX outbox_conversation ON outbox (conversation_id, id)`,
		fmt.Sprintf(`INSERT INTO outbox (conversation_id, tool_call_id, to_addr, subject, body, created_at) VALUES ('%s', 'call_0', 'a@example.test', 's', 'b', 0)`, ana.ID),
		`DROP TABLE signin_attempts`,             // migration 021
		`ALTER TABLE users DROP COLUMN disabled`, // migration 023
		`PRAGMA user_version = 1`,
	} {
		if _, err := s.DB.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("open a version 1 file: %v", err)
	}
	defer s.Close()
	if err := store.Ready(ctx, s); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	if hits, err := s.FindConversations(ctx, "ana", "zebra", 0); err != nil || len(hits) != 1 || hits[0].ID != ana.ID || hits[0].Seq != 1 {
		t.Fatalf("an old message after the upgrade: %v %+v", err, hits)
	}
	old, err := s.ListOutbox(ctx, ana.ID)
	if err != nil || len(old) != 1 || old[0].ToolCallID != "call_0" || old[0].To != "a@example.test" {
		t.Fatalf("the old message: %v %+v", err, old)
	}
	m, err := s.AddOutbox(ctx, store.OutboxMessage{ConversationID: bob.ID, ToolCallID: "call_0", To: "b@example.test"})
	if err != nil || m.ID == old[0].ID || m.ConversationID != bob.ID {
		t.Fatalf("Bob's call_0 after the upgrade: %v %+v", err, m)
	}
	if err := s.AddUsage(ctx, "ana", time.Now(), 5); err != nil {
		t.Fatalf("usage after the upgrade: %v", err)
	}
	if tok, err := s.APITokenByHash(ctx, []byte("old-token")); err != nil || tok.Scope != store.ScopeFull || tok.ExpiresAt != nil {
		t.Fatalf("a token from before the upgrade: %v %+v, want full scope and no expiry", err, tok)
	}
	if list, err := s.ListInvitations(ctx); err != nil || len(list) != 0 {
		t.Fatalf("invitations after the upgrade: %v %v", err, list)
	}
	// An audit record from before the chain is chained by the upgrade, unkeyed, first; the next
	// record written is keyed.
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "u", Action: "deny"}); err != nil {
		t.Fatalf("audit after the upgrade: %v", err)
	}
	chain, err := s.AuditChain(ctx, 0, 0)
	v := store.ChainVerifier{Key: s.AuditKey()}
	if err != nil || len(chain) != 2 || chain[0].Action != "approve" || chain[0].KeyID != "" || chain[1].KeyID != s.AuditKey().ID() ||
		v.Next(chain[0]) != nil || v.Next(chain[1]) != nil || v.Unkeyed() != 1 {
		t.Fatalf("the chain after the upgrade: %v %+v", err, chain)
	}
	// The store anchors heads with the unkeyed prefix's length, and verification holds the
	// chain to it.
	var anchors store.Anchors
	anchors.Add(store.AuditHead{Seq: 2, Hash: chain[1].Hash, Legacy: 0})
	v = store.ChainVerifier{Key: s.AuditKey(), Anchors: &anchors}
	if err := v.Next(chain[0]); err == nil {
		t.Fatal("an unkeyed record past the anchor's unkeyed prefix verified")
	}
	a := &headSink{}
	s.SetAuditAnchor(a)
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "u", Action: "approve"}); err != nil {
		t.Fatal(err)
	}
	if a.head.Seq != 3 || a.head.Legacy != 1 || s.AuditKey().CheckHead(a.head) != nil {
		t.Fatalf("anchored head = %+v", a.head)
	}
}

// headSink keeps the last head anchored.
type headSink struct{ head store.AuditHead }

func (h *headSink) Anchor(a store.AuditHead) { h.head = a }

// TestSearchIndexFollowsDeletes: the FTS5 index loses a conversation's messages with it (the
// cascade reaches message_text, whose trigger updates the index), not only in what a search
// joins.
func TestSearchIndexFollowsDeletes(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana",
		Data: []byte(`{"text":"zebras and lions"}`)}}}); err != nil {
		t.Fatal(err)
	}
	if hits, err := s.FindConversations(ctx, "ana", "zebras", 0); err != nil || len(hits) != 1 { // indexes before it reads
		t.Fatalf("search = %v %+v", err, hits)
	}
	count := func() (n int64) {
		t.Helper()
		rows, err := s.DB.Query(ctx, `SELECT (SELECT count(*) FROM message_text) + (SELECT count(*) FROM message_search WHERE message_search MATCH $1)`, ftsMatch("ana", []string{"zebras"}))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("indexed rows after the append and a search = %d, want 2", n)
	}
	if err := s.DeleteConversation(ctx, c.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("indexed rows after the delete = %d, want 0", n)
	}
}

// TestUpgradeKeepsOldGrantsForAnyArguments: a grant written before grants named their arguments
// (a file at migration 018) covered any arguments, and still does after the upgrade (the grants
// pages say so); grants written after it name theirs, and an exact one covers its arguments only.
func TestUpgradeKeepsOldGrantsForAnyArguments(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "parley.db")
	db := rawFile(t, path)
	for _, m := range schemaMigrations {
		if m.Version > 18 {
			break
		}
		execAll(t, db, m.SQL)
	}
	now := time.Now().UTC().Truncate(time.Second)
	execAll(t, db, `PRAGMA user_version = 18`,
		`INSERT INTO users (id, name, role, created_at) VALUES ('ana', 'ana', 'admin', 0)`,
		`INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at) VALUES ('c1', 'ana', 'a', 'idle', 0, 0, 0)`,
		fmt.Sprintf(`INSERT INTO grants VALUES ('g-old', 'ana', 'pay', 'user', 'c1', 'c1', 'ana', %d, %d, NULL)`,
			now.UnixMicro(), now.Add(time.Hour).UnixMicro()))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open a file at migration 018: %v", err)
	}
	defer s.Close()
	if err := store.Ready(ctx, s); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	ana, conv := store.User{ID: "ana"}, store.Conversation{ID: "c1"}
	g, err := s.ActiveGrant(ctx, ana.ID, conv.ID, "pay", "any-hash", now)
	if err != nil || g.ID != "g-old" || g.ArgsScope != store.GrantArgsAny || g.ArgsHash != "" || !g.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("the old grant after the upgrade: %v %+v", err, g)
	}
	if _, err := s.Append(ctx, conv.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: ana.ID, Data: []byte(`{}`)}},
		Grants: []store.Grant{{ID: "g-new", UserID: ana.ID, Tool: "lookup", Scope: store.GrantUser, CreatedBy: ana.ID, CreatedAt: now,
			ExpiresAt: now.Add(time.Hour), ArgsScope: store.GrantArgsExact, ArgsHash: "h1"}}}); err != nil {
		t.Fatalf("a grant after the upgrade: %v", err)
	}
	if _, err := s.ActiveGrant(ctx, ana.ID, conv.ID, "lookup", "h2", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an exact grant for other arguments: %v", err)
	}
}

// TestSearchTimeout: a search past its deadline is interrupted and answered
// store.ErrSearchTimeout.
func TestSearchTimeout(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "parley.db"), WithSearchTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	storetest.SearchTimeout(t, s)
}
