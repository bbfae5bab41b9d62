package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
)

// These tests hold the background indexer still with a fake clock (it waits indexDelay on the
// store's clock, which they never advance unless they say so), so what a search finds is what
// the search itself indexed.

func openFake(t *testing.T, path string) (*Store, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC))
	s, err := Open(t.Context(), path, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, fc
}

func appendMessage(t *testing.T, s *Store, convID string, after int64, text string) int64 {
	t.Helper()
	seq, err := s.Append(t.Context(), convID, after, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana",
		Data: []byte(fmt.Sprintf(`{"text":%q}`, text))}}})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// count returns the first column of q's one row, read on the file.
func count(t *testing.T, s *Store, q string) int64 {
	t.Helper()
	rows, err := s.DB.Query(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

const (
	countIndexed = `SELECT (SELECT count(*) FROM message_text)`
	countPending = `SELECT count(*) FROM conversations WHERE last_seq > indexed_seq`
)

func find(t *testing.T, s *Store, owner, q string) []store.SearchHit {
	t.Helper()
	hits, err := s.FindConversations(t.Context(), owner, q, 0)
	if err != nil {
		t.Fatalf("FindConversations(%s, %q): %v", owner, q, err)
	}
	return hits
}

// An append does not index its message; the next search does, before it reads.
func TestSearchIndexesWhatWasAppendedBeforeIt(t *testing.T) {
	s, _ := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	c, err := s.CreateConversation(t.Context(), store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	seq := appendMessage(t, s, c.ID, 0, "zebras and lions")
	if n := count(t, s, countIndexed); n != 0 {
		t.Fatalf("indexed rows right after the append = %d, want 0 (indexed outside the append)", n)
	}
	if hits := find(t, s, "ana", "zebras"); len(hits) != 1 || hits[0].ID != c.ID || hits[0].Seq != seq {
		t.Fatalf("search right after the append = %+v, want conversation %s at %d", hits, c.ID, seq)
	}
	// Another owner's search indexes only its own owner's conversations.
	other, err := s.CreateConversation(t.Context(), store.Conversation{OwnerID: "bob", Title: "b"})
	if err != nil {
		t.Fatal(err)
	}
	appendMessage(t, s, other.ID, 0, "zebras too")
	if hits := find(t, s, "ana", "zebras"); len(hits) != 1 || hits[0].ID != c.ID {
		t.Fatalf("ana's search = %+v", hits)
	}
	if n := count(t, s, countPending); n != 1 {
		t.Fatalf("pending conversations after ana's search = %d, want bob's 1", n)
	}
	if hits := find(t, s, "bob", "zebras"); len(hits) != 1 || hits[0].ID != other.ID {
		t.Fatalf("bob's search = %+v", hits)
	}
}

// Messages appended and never indexed before the store closed (a crash leaves the same: the
// entries committed, indexed_seq behind) are found after it opens again, and the background
// indexer takes them without a search.
func TestUnindexedMessagesSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parley.db")
	s, _ := openFake(t, path)
	c, err := s.CreateConversation(t.Context(), store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	appendMessage(t, s, c.ID, 0, "zebras before the restart")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, fc := openFake(t, path)
	if n := count(t, s, countPending); n != 1 {
		t.Fatalf("pending conversations after the restart = %d, want 1", n)
	}
	waitForIndexer(t, fc) // the round every Open starts with
	fc.Advance(indexDelay)
	// Once the indexer waits again (for the round this append asks for), the first is done.
	appendMessage(t, s, c.ID, 1, "lions after the restart")
	waitForIndexer(t, fc)
	if n := count(t, s, `SELECT count(*) FROM message_text WHERE seq = 1`); n != 1 {
		t.Fatalf("the first message's indexed rows after the background round = %d, want 1", n)
	}
	if hits := find(t, s, "ana", "zebras"); len(hits) != 1 || hits[0].Seq != 1 {
		t.Fatalf("search for the message from before the restart = %+v", hits)
	}
	if hits := find(t, s, "ana", "lions"); len(hits) != 1 || hits[0].Seq != 2 {
		t.Fatalf("search for the message after the restart = %+v", hits)
	}
}

// waitForIndexer waits until the background indexer waits for its delay on fc.
func waitForIndexer(t *testing.T, fc *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fc.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the background indexer never waited for its delay")
		}
		runtime.Gosched()
	}
}

// A conversation deleted before its messages were indexed takes them with it, and a new
// conversation under the same id (so the same log keys) is indexed from its own start: the
// old messages never appear, the new one does.
func TestDeletedUnindexedMessagesNeverAppear(t *testing.T) {
	s, _ := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	ctx := t.Context()
	c, err := s.CreateConversation(ctx, store.Conversation{ID: "reused", OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	appendMessage(t, s, c.ID, 0, "zebras first")
	appendMessage(t, s, c.ID, 1, "zebras second")
	if err := s.DeleteConversation(ctx, c.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatal(err)
	}
	if hits := find(t, s, "ana", "zebras"); len(hits) != 0 {
		t.Fatalf("search after the delete = %+v, want none", hits)
	}
	if _, err := s.CreateConversation(ctx, store.Conversation{ID: "reused", OwnerID: "ana", Title: "b"}); err != nil {
		t.Fatal(err)
	}
	appendMessage(t, s, c.ID, 0, "lions now")
	if hits := find(t, s, "ana", "zebras"); len(hits) != 0 {
		t.Fatalf("search for the deleted messages after the id's reuse = %+v, want none", hits)
	}
	if hits := find(t, s, "ana", "lions"); len(hits) != 1 || hits[0].ID != "reused" || hits[0].Seq != 1 {
		t.Fatalf("search for the new message = %+v", hits)
	}
	if n := count(t, s, countIndexed+` + (SELECT count(*) FROM message_search WHERE message_search MATCH 'zebras')`); n != 1 {
		t.Fatalf("indexed rows = %d, want the new message's 1", n)
	}
}

// A backlog of more than one indexing transaction (indexBatch entries), in one long log and
// across more conversations than one page of pendingPage, is indexed whole by one search.
func TestSearchIndexesABacklogLargerThanABatch(t *testing.T) {
	s, _ := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	ctx := t.Context()
	long, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "long"})
	if err != nil {
		t.Fatal(err)
	}
	// One append of 2.5 batches' worth: messages with tool calls between them.
	var b store.Batch
	for i := range indexBatch * 5 / 2 {
		if i%2 == 1 {
			b.Entries = append(b.Entries, store.Entry{Type: store.EntryToolCall, ToolCallID: fmt.Sprint("call-", i), Actor: "model", Data: []byte(`{"text":"zebras in a call"}`)})
			continue
		}
		b.Entries = append(b.Entries, store.Entry{Type: store.EntryUserMessage, Actor: "ana", Data: []byte(fmt.Sprintf(`{"text":"zebra%d"}`, i))})
	}
	last, err := s.Append(ctx, long.ID, 0, b)
	if err != nil {
		t.Fatal(err)
	}
	convs := pendingPage + 5
	for i := range convs {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		appendMessage(t, s, c.ID, 0, fmt.Sprintf("lions%d", i))
	}
	// The last message is entry i = last-2, at seq last-1.
	if hits := find(t, s, "ana", fmt.Sprint("zebra", last-2)); len(hits) != 1 || hits[0].Seq != last-1 {
		t.Fatalf("search for the long log's last message = %+v, want seq %d", hits, last-1)
	}
	if hits := find(t, s, "ana", fmt.Sprint("lions", convs-1)); len(hits) != 1 {
		t.Fatalf("search for the last conversation's message = %+v", hits)
	}
	if n, want := count(t, s, countIndexed), int64(len(b.Entries)/2+convs); n != want {
		t.Fatalf("indexed rows = %d, want %d (every message, once)", n, want)
	}
	if n := count(t, s, countPending); n != 0 {
		t.Fatalf("pending conversations after the search = %d, want 0", n)
	}
	if hits := find(t, s, "ana", "call"); len(hits) != 0 {
		t.Fatalf("a tool call's text was indexed: %+v", hits)
	}
}

// TestUpgradeFromVersion7KeepsTheIndex: a version 7 file (messages indexed by a trigger in the
// append) keeps what it indexed, indexes nothing twice, and indexes later messages the new way.
func TestUpgradeFromVersion7KeepsTheIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parley.db")
	s, _ := openFake(t, path)
	ctx := t.Context()
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE conversations DROP COLUMN indexed_seq`,
		`CREATE TRIGGER entries_search_ai AFTER INSERT ON entries WHEN new.type IN ('user_message', 'assistant_message') BEGIN
	INSERT INTO message_text (conversation_id, seq, body) VALUES (new.conversation_id, new.seq,
		substr(replace(replace(coalesce(json_extract(CAST(new.data AS TEXT), '$.text'), ''), char(2), ''), char(3), ''), 1, 100000));
END`,
		// The audit table as version 8 had it.
		`DROP TRIGGER audit_no_update`,
		`DROP TRIGGER audit_no_delete`,
		`DROP INDEX audit_unkeyed`,
		`ALTER TABLE audit DROP COLUMN key_id`,
		`CREATE INDEX audit_unchained ON audit (id) WHERE chain_seq IS NULL`,
		`DROP TABLE signin_attempts`,             // migration 021
		`ALTER TABLE users DROP COLUMN disabled`, // migration 023
		`PRAGMA user_version = 7`,
	} {
		if _, err := s.DB.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Version 7 indexes in the append.
	appendMessage(t, s, c.ID, 0, "zebras under version 7")
	if n := count(t, s, countIndexed); n != 1 {
		t.Fatalf("indexed rows under version 7 = %d, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = openFake(t, path)
	if have, want, err := s.SchemaVersion(ctx); err != nil || have != want || want != schemaVersion {
		t.Fatalf("schema version after the upgrade = %d, want %d (%d): %v", have, want, schemaVersion, err)
	}
	// Migration 022 rebuilds the index with owner-scoped terms: every conversation is pending.
	if n := count(t, s, countPending); n != 1 {
		t.Fatalf("pending conversations after the upgrade = %d, want 1 (022 rebuilds the index)", n)
	}
	appendMessage(t, s, c.ID, 1, "lions under version 8")
	if n := count(t, s, countIndexed); n != 0 {
		t.Fatalf("indexed rows after an append under version 8 = %d, want 0 (the old trigger gone, 022's rebuild pending)", n)
	}
	if hits := find(t, s, "ana", "zebras"); len(hits) != 1 || hits[0].Seq != 1 {
		t.Fatalf("the version 7 message = %+v", hits)
	}
	if hits := find(t, s, "ana", "lions"); len(hits) != 1 || hits[0].Seq != 2 {
		t.Fatalf("the version 8 message = %+v", hits)
	}
	if n := count(t, s, countIndexed); n != 2 {
		t.Fatalf("indexed rows = %d, want 2", n)
	}
}

// Close stops the background indexer and waits for it; a store closed with a round waiting
// returns.
func TestCloseStopsTheIndexer(t *testing.T) {
	s, fc := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	waitForIndexer(t, fc)
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := s.d.readPending(context.Background(), pendingAnySQL, 1); err == nil {
		t.Fatal("the file is still open after Close")
	}
}

// When more appends than maxHints wait for the background indexer, the hints it dropped are
// not lost: that round looks through every conversation. The hints here name conversations
// that do not exist (deleted ones look the same), which the round skips.
func TestIndexerScansWhenItsHintsOverflow(t *testing.T) {
	s, fc := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	ctx := t.Context()
	conv := func(title string) store.Conversation {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: title})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first, second, unhinted := conv("first"), conv("second"), conv("unhinted")
	waitForIndexer(t, fc)
	fc.Advance(indexDelay) // the round Open asks for
	// Once the indexer waits again, for the round this append asks for, the first is done.
	appendMessage(t, s, first.ID, 0, "zebras")
	waitForIndexer(t, fc)
	// The log moves with no hint (Core.Append is the append without it), then the queue fills.
	if _, err := s.Core.Append(ctx, unhinted.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana",
		Data: []byte(`{"text":"lions"}`)}}}); err != nil {
		t.Fatal(err)
	}
	for i := range maxHints {
		s.ix.appended(fmt.Sprint("missing-", i))
	}
	fc.Advance(indexDelay)
	appendMessage(t, s, second.ID, 0, "tigers")
	waitForIndexer(t, fc)
	// (The round may or may not see the last append.) The round may still be running when the
	// indexer's wait is seen (a loaded machine): no other round comes without another Advance,
	// so the unhinted conversation is indexed only by this round's scan, or never.
	q := fmt.Sprintf(`SELECT count(*) FROM message_text WHERE conversation_id IN ('%s', '%s')`, first.ID, unhinted.ID)
	deadline := time.Now().Add(10 * time.Second)
	for n := count(t, s, q); n != 2; n = count(t, s, q) {
		if time.Now().After(deadline) {
			t.Fatalf("indexed rows of the hinted and the unhinted conversation after the round = %d, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A message whose data is not JSON never reaches the file through Append (it is refused), but a
// file may hold one (written otherwise): it indexes as no text, and the owner's searches and the
// other messages indexed with it go on.
func TestDataThatIsNotJSONDoesNotStallIndexing(t *testing.T) {
	s, _ := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	c, err := s.CreateConversation(t.Context(), store.Conversation{OwnerID: "ana", Title: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana", Data: []byte(`{"text":"hello`)}}}); err == nil {
		t.Fatal("Append took data that is not JSON")
	}
	seq := appendMessage(t, s, c.ID, 0, "zebras and lions")
	if _, err := s.DB.Exec(t.Context(), `INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at) VALUES (?, ?, 'user_message', '', 'ana', CAST('{"text":"broken' AS BLOB), 0)`, c.ID, seq+1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(t.Context(), `UPDATE conversations SET last_seq = ? WHERE id = ?`, seq+1, c.ID); err != nil {
		t.Fatal(err)
	}
	appendMessage(t, s, c.ID, seq+1, "giraffes")
	if hits := find(t, s, "ana", "zebras"); len(hits) != 1 || hits[0].ID != c.ID {
		t.Fatalf("search beside a message that is not JSON = %+v", hits)
	}
	if hits := find(t, s, "ana", "giraffes"); len(hits) != 1 {
		t.Fatalf("the message after it = %+v", hits)
	}
	if n := count(t, s, countPending); n != 0 {
		t.Fatalf("%d conversations left pending", n)
	}
}
