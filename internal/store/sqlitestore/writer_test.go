package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"parley/internal/store"
)

func openT(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A COMMIT that fails leaves its transaction open on the connection; the writer rolls it back,
// so the next write starts clean instead of failing with "cannot start a transaction within a
// transaction" on the connection it holds for good.
func TestWriterRecoversFromAFailedCommit(t *testing.T) {
	s, ctx := openT(t), t.Context()
	tx, err := s.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Foreign keys checked at COMMIT: an entry of a conversation that does not exist fails there.
	if _, err := tx.Exec(ctx, `PRAGMA defer_foreign_keys = ON`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at) VALUES ($1, 1, 'user_message', '', 'a', NULL, 0)`, "nope"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("commit = %v, want the foreign key's store.ErrNotFound", err)
	}
	if err := tx.Rollback(ctx); err == nil {
		t.Fatal("rollback after the commit: want an error, the transaction is over")
	}
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "u1", Title: "after"})
	if err != nil {
		t.Fatalf("a write after the failed commit: %v", err)
	}
	if _, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "u1", Data: json.RawMessage(`{"text":"hi"}`)}}}); err != nil {
		t.Fatalf("append after the failed commit: %v", err)
	}
	es, err := s.Log(ctx, "nope", 0)
	if err == nil && len(es) > 0 {
		t.Fatalf("the failed transaction's entry is in the log: %+v", es)
	}
}

// A write waits for the transaction holding the writer, and gives up when its context ends; once
// the writer is free, writes go on. Close waits for the transaction in progress, and a write
// after Close fails at once.
func TestWriterTurns(t *testing.T) {
	s, ctx := openT(t), t.Context()
	tx, err := s.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.CreateConversation(short, store.Conversation{OwnerID: "u1", Title: "waits"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write while a transaction holds the writer = %v, want its context's deadline", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)`, "k", "v"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a transaction was open", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit while Close waits: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := s.DB.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)`, "k2", "v"); !errors.Is(err, errClosed) {
		t.Fatalf("write after Close = %v, want errClosed", err)
	}
}
