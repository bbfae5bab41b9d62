package pgstore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

// keptTables hold rows of a conversation that outlive it: the audit trail and the outbox by
// design (store.Store's DeleteConversation), and what never had a key to conversations.
var keptTables = []string{"audit", "outbox", "grants", "inbox_claims", "client_presence"}

// fullBatch writes a row into every table an append writes.
func fullBatch(call string) store.Batch {
	return store.Batch{Status: store.StatusAwaiting,
		Entries: []store.Entry{
			{Type: store.EntryUserMessage, Actor: "ana", Data: json.RawMessage(`{"text":"send bob the report"}`)},
			{Type: store.EntryToolCall, ToolCallID: call, Actor: "model", Data: json.RawMessage(`{}`)},
		},
		Calls: []store.ToolCall{{ToolCallID: call, Name: "deliver_email", Executor: "server", Approval: "requires_approval",
			Approvers: "owner", Status: store.CallAwaiting, PendingKind: "approval"}},
		Schedule: []store.Expiry{{ToolCallID: call, At: time.Now().Add(time.Hour)}},
		Steps:    []store.Step{{Key: "tool:" + call, Attempts: 1}},
		Audit:    []store.AuditRecord{{ToolCallID: call, Tool: "deliver_email", ActorID: "ana", Action: "approve"}},
	}
}

// conversationTables are the tables with a conversation_id column, kept ones left out.
func conversationTables(t *testing.T, s *pgstore.Store) []string {
	t.Helper()
	rows, err := s.Pool().Query(t.Context(), `SELECT table_name::text FROM information_schema.columns
		WHERE table_schema = 'public' AND column_name = 'conversation_id' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, table := range all {
		if !slices.Contains(keptTables, table) {
			out = append(out, table)
		}
	}
	if !slices.Contains(out, "entries") || !slices.Contains(out, "conversation_owners") {
		t.Fatalf("tables with a conversation_id: %v, want entries and conversation_owners among them", out)
	}
	return out
}

// orphans counts the rows of tables whose conversation is not in conversations.
func orphans(t *testing.T, s *pgstore.Store, tables []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range tables {
		var n int
		q := fmt.Sprintf(`SELECT count(*) FROM %s x WHERE NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = x.conversation_id)`, pgx.Identifier{table}.Sanitize())
		if err := s.Pool().QueryRow(t.Context(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out[table] = n
		}
	}
	return out
}

// TestDeleteConversationLeavesNoRows: every table holding a conversation's rows — the log tables,
// which have no foreign key to conversations (migration 014), and its cluster ownership — keeps
// none of a deleted conversation's, whether the store deleted it or an operator (or a binary
// from before 014, which relied on the keys' cascade) deleted its row by hand; other
// conversations keep theirs.
func TestDeleteConversationLeavesNoRows(t *testing.T) {
	ctx := t.Context()
	s, err := pgstore.Open(ctx, pgtest.NewURL(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tables := conversationTables(t, s)
	var ids []string
	for range 3 {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "doomed"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, c.ID, 0, fullBatch("call_1")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO cluster_nodes (id) VALUES ($1) ON CONFLICT DO NOTHING`, "node-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO conversation_owners (conversation_id, node_id) VALUES ($1, 'node-a')`, c.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	for _, table := range tables {
		var n int
		if err := s.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE conversation_id = $1`, pgx.Identifier{table}.Sanitize()), ids[0]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("the fixture wrote no row into %s: the test would prove nothing for it", table)
		}
	}
	if err := s.DeleteConversation(ctx, ids[0], store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM conversations WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		var gone, kept int
		if err := s.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE conversation_id IN ($1, $2)), count(*) FILTER (WHERE conversation_id = $3) FROM %s`,
			pgx.Identifier{table}.Sanitize()), ids[0], ids[1], ids[2]).Scan(&gone, &kept); err != nil {
			t.Fatal(err)
		}
		if gone != 0 || kept == 0 {
			t.Errorf("%s: %d rows of the deleted conversations (want 0), %d of the other (want some)", table, gone, kept)
		}
	}
}

// TestAppendRacingDeleteLeavesNoOrphan: an append, a timer (ScheduleExpiry) and the deletion of
// their conversation, started together, end with each write either committed before the deletion
// (and its rows deleted with the conversation) or refused (store.ErrNotFound) — never with rows
// of a conversation that no longer exists, grouped or not.
func TestAppendRacingDeleteLeavesNoOrphan(t *testing.T) {
	for _, committers := range []int{0, 2} {
		t.Run(fmt.Sprintf("committers=%d", committers), func(t *testing.T) {
			ctx := t.Context()
			s, err := pgstore.Open(ctx, pgtest.NewURL(t)+"&pool_max_conns=8", nil, pgstore.WithCommitters(committers))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tables := conversationTables(t, s)
			const n = 60
			convs := make([]string, n)
			for i := range convs {
				c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "race"})
				if err != nil {
					t.Fatal(err)
				}
				convs[i] = c.ID
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			appended := 0
			for _, id := range convs {
				wg.Go(func() {
					<-start
					_, err := s.Append(ctx, id, 0, fullBatch("call_1"))
					switch {
					case err == nil:
						mu.Lock()
						appended++
						mu.Unlock()
					case !errors.Is(err, store.ErrNotFound):
						t.Errorf("append racing a delete: %v, want success or store.ErrNotFound", err)
					}
				})
				wg.Go(func() {
					<-start
					err := s.ScheduleExpiry(ctx, store.Expiry{ConversationID: id, ToolCallID: "call_2", At: time.Now().Add(time.Hour)})
					if err != nil && !errors.Is(err, store.ErrNotFound) {
						t.Errorf("a timer racing a delete: %v, want success or store.ErrNotFound", err)
					}
				})
				wg.Go(func() {
					<-start
					if err := s.DeleteConversation(ctx, id, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
						t.Errorf("delete racing an append: %v", err)
					}
				})
			}
			close(start)
			wg.Wait()
			if got := orphans(t, s, tables); len(got) > 0 {
				t.Fatalf("rows of deleted conversations left behind: %v (%d of %d appends committed)", got, appended, n)
			}
			t.Logf("%d of %d appends committed before their conversation's deletion", appended, n)
		})
	}
}
