package pgstore

import (
	"slices"
	"strings"
	"testing"

	"parley/internal/store"
	"parley/internal/store/pgtest"
	"parley/migrations"
)

// TestAppendWritesAuditRecordsChained: an append's audit records are inserted already in the
// keyed chain, one row version each, after the records AppendAudit chained; the chain verifies
// with the store's key.
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
	// Every record is written once, already linked: no second row version.
	if want := []string{"(0,1)", "(0,2)", "(0,3)"}; !slices.Equal(ctids, want) {
		t.Errorf("row versions = %v, want %v", ctids, want)
	}

	v := store.ChainVerifier{Key: s.AuditKey()}
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

// TestAuditTableRefusesRewrites: PostgreSQL refuses TRUNCATE of the audit table (which row
// triggers do not see) and a record without a place in the chain, and the function that
// re-chained records inside the database (parley_chain_audit: null chain_seq, call it, and the
// rewritten chain verified) is gone.
func TestAuditTableRefusesRewrites(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewURL(t)
	s, err := Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "u", Action: "approve"}); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{
		`TRUNCATE audit`:              "append-only",
		`SELECT parley_chain_audit()`: "does not exist",
		`SELECT parley_audit_append(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`:                                                                     "does not exist",
		`INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at) VALUES ('', '', 't', 'u', 'approve', '', '', now())`: "chain_seq",
	} {
		if _, err := s.Pool().Exec(ctx, q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", q, err, want)
		}
	}
}

// TestAuditChainAcrossMigration020: records written before migration 020 (unkeyed, chained by
// the database) stay the chain's prefix; records after it are keyed; the store anchors heads
// naming the prefix (storetest's AuditRechained shows what verification does with it).
func TestAuditChainAcrossMigration020(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewURL(t)
	pool, err := connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m migrations.Migration) bool { return m.Version == 20 })
	if i < 0 {
		t.Fatal("no migration 20")
	}
	if err := applyMigrations(ctx, pool, ms[:i], nil); err != nil {
		t.Fatal(err)
	}
	// Two records the way a binary from before migration 020 wrote them.
	if _, err := pool.Exec(ctx, `SELECT parley_audit_append(ARRAY['c','c'], ARRAY['x1','x2'], ARRAY['t','t'], ARRAY['ana','rev'],
		ARRAY['approve','deny'], ARRAY['','no'], ARRAY['h1','h2'], ARRAY[now(), now()]::timestamptz[], ARRAY['',''])`); err != nil {
		t.Fatal(err)
	}
	heads := &lastHead{}
	s, err := Open(ctx, url, nil, WithAuditAnchor(heads))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "ana", Action: "grant_revoke"}); err != nil {
		t.Fatal(err)
	}
	if heads.h.Seq != 3 || heads.h.Legacy != 2 || s.AuditKey().CheckHead(heads.h) != nil {
		t.Fatalf("anchored head = %+v", heads.h)
	}
	verify := func(anchors *store.Anchors) error {
		v := store.ChainVerifier{Key: s.AuditKey(), Anchors: anchors}
		recs, err := s.AuditChain(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := v.Next(r); err != nil {
				return err
			}
		}
		if v.Unkeyed() != 2 {
			t.Fatalf("unkeyed records = %d, want 2", v.Unkeyed())
		}
		return v.End()
	}
	var anchors store.Anchors
	anchors.Add(heads.h)
	if err := verify(&anchors); err != nil {
		t.Fatalf("the chain across the migration: %v", err)
	}
}

type lastHead struct{ h store.AuditHead }

func (l *lastHead) Anchor(h store.AuditHead) { l.h = h }
