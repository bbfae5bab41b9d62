package pgstore

import (
	"context"
	"slices"
	"strings"
	"testing"

	"parley/internal/store/pgtest"
	"parley/migrations"
	"parley/migrations/schemadump"
)

// pgDump is the schema of the database at url as schemadump reads it from the catalog (what
// migrations/postgres/schema.sql holds).
func pgDump(t *testing.T, url string) string {
	t.Helper()
	text, err := schemadump.Postgres(t.Context(), connectT(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// freshDump is the schema of a new database that Migrate took to the newest version at once.
func freshDump(t *testing.T) string {
	t.Helper()
	url := pgtest.NewURL(t)
	if err := Migrate(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	return pgDump(t, url)
}

// TestUpgradeFromTheFirstMigrationEqualsFresh: a database at migration 001 holding data, taken
// up one migration at a time (one binary after another), ends with the same catalog as a fresh
// one: tables, columns, constraints, indexes, triggers and functions' bodies.
func TestUpgradeFromTheFirstMigrationEqualsFresh(t *testing.T) {
	want := freshDump(t)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.NewURL(t)
	pool, err := connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := applyMigrations(t.Context(), pool, ms[:1], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO users (id, name, role, created_at) VALUES ('ana', 'ana', 'admin', now());
		INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at) VALUES ('c1', 'ana', 'zoo', 'idle', 1, now(), now());
		INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at) VALUES ('c1', 1, 'user_message', '', 'ana', '{"text":"zebras at dawn"}', now());
		INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at) VALUES ('c1', 'call_0', 't', 'ana', 'approve', '', 'h', now());
		INSERT INTO outbox (conversation_id, tool_call_id, to_addr, subject, body, created_at) VALUES ('c1', 'call_0', 'a@example.test', 's', 'b', now())`); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= len(ms); i++ {
		if err := applyMigrations(t.Context(), pool, ms[:i], nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := pgDump(t, url); got != want {
		t.Fatalf("upgraded from 001 one migration at a time, the schema differs from a fresh database's:\n%s", lineDiff(want, got))
	}
	// The data went along: the record from before 008 was chained (013), the message is searchable.
	var chained, found int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM audit WHERE chain_seq = 1 AND hash <> ''),
		(SELECT count(*) FROM entries WHERE search @@ to_tsquery('simple', 'zebras'))`).Scan(&chained, &found); err != nil {
		t.Fatal(err)
	}
	if chained != 1 || found != 1 {
		t.Fatalf("after the upgrade: %d chained audit records, %d messages found; want 1 and 1", chained, found)
	}
}

// TestUpgradeADatabaseOfTheFolderLayout: a database migrated by a binary from before the dialect
// folders recorded 1-5 and 7-16 (there was no 006). Its versions stay valid: the next binary
// applies only what is newer than 016, and the schema is a fresh database's.
func TestUpgradeADatabaseOfTheFolderLayout(t *testing.T) {
	want := freshDump(t)
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	before := slices.DeleteFunc(slices.Clone(ms), func(m migrations.Migration) bool { return m.Version == 6 || m.Version > 16 })
	url := pgtest.NewURL(t)
	pool, err := connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := applyMigrations(t.Context(), pool, before, nil); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(t.Context(), url); err != nil {
		t.Fatalf("the next binary's migrate: %v", err)
	}
	var versions []int
	if err := pool.QueryRow(t.Context(), `SELECT array_agg(version ORDER BY version) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	var wantVersions []int
	for _, m := range ms {
		if m.Version != 6 {
			wantVersions = append(wantVersions, m.Version)
		}
	}
	if !slices.Equal(versions, wantVersions) {
		t.Fatalf("schema_migrations holds %v, want %v", versions, wantVersions)
	}
	if got := pgDump(t, url); got != want {
		t.Fatalf("the upgraded database's schema differs from a fresh one's:\n%s", lineDiff(want, got))
	}
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if have, want, err := s.SchemaVersion(t.Context()); err != nil || have != want {
		t.Fatalf("SchemaVersion = %d, %d, %v", have, want, err)
	}
}

// lineDiff lists the lines only one of a and b has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
