package pgstore

import (
	"slices"
	"testing"

	"parley/internal/store"
	"parley/internal/store/pgtest"
)

// TestAppendWritesAuditRecordsChained: an append's audit records are inserted already in the
// hash chain (migration 013), one row version each — not inserted and then updated by the chain,
// which left a dead version of every record and an entry for it in each of audit's indexes —
// after the records AppendAudit chained.
func TestAppendWritesAuditRecordsChained(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewURL(t)
	s, err := Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn := connectT(t, url)
	cv, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, store.AuditRecord{ConversationID: cv.ID, ToolCallID: "old", Tool: "send_email", ActorID: "ana", Action: "grant_revoke"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, cv.ID, 0, store.Batch{
		Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana", Data: []byte(`{"text":"hi"}`)}},
		Audit: []store.AuditRecord{
			{ToolCallID: "a", Tool: "send_email", ActorID: "ana", Action: "approve", ArgsHash: "h1"},
			{ToolCallID: "b", Tool: "send_email", ActorID: "rev", Action: "deny", Reason: "no", ArgsHash: "h2"},
		},
	}); err != nil {
		t.Fatal(err)
	}

	rows, err := conn.Query(ctx, `SELECT tool_call_id, ctid::text FROM audit ORDER BY chain_seq`)
	if err != nil {
		t.Fatal(err)
	}
	var order, ctids []string
	for rows.Next() {
		var id, ctid string
		if err := rows.Scan(&id, &ctid); err != nil {
			t.Fatal(err)
		}
		order, ctids = append(order, id), append(ctids, ctid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"old", "a", "b"}; !slices.Equal(order, want) {
		t.Fatalf("chain order = %v, want %v", order, want)
	}
	// AppendAudit's record is inserted and then chained by an update (its second version,
	// (0,2)); the append's were written once, after it: (0,3) and (0,4). Inserted unchained and
	// then chained, they would be at (0,5) and (0,6).
	if want := []string{"(0,2)", "(0,3)", "(0,4)"}; !slices.Equal(ctids, want) {
		t.Errorf("row versions = %v, want %v", ctids, want)
	}

	var v store.ChainVerifier
	recs, err := s.AuditChain(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := v.Next(r); err != nil {
			t.Fatalf("chain: %v", err)
		}
	}
	if n, _ := v.Verified(); n != 3 {
		t.Fatalf("verified %d records, want 3", n)
	}
}
