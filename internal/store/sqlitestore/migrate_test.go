package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"parley/internal/store"
	"parley/migrations/schemadump"
)

// legacySchema is the whole schema.sql of the embedded store before the numbered migrations,
// at its own version 8: a file created by those binaries is exactly this.
//
//go:embed testdata/schema-v8.sql
var legacySchema string

// rawFile opens path as a plain database/sql handle, with no migration.
func rawFile(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func execAll(t *testing.T, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.80s: %v", q, err)
		}
	}
}

// dump is the file's schema as schemadump writes it (migrations/sqlite/schema.sql), and its
// user_version.
func dump(t *testing.T, path string) (string, int) {
	t.Helper()
	db := rawFile(t, path)
	text, err := schemadump.SQLite(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return text, v
}

// fresh is the schema of a file the migrations made from nothing.
func fresh(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fresh.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	text, v := dump(t, path)
	if v != schemaVersion {
		t.Fatalf("a fresh file is at version %d, want %d", v, schemaVersion)
	}
	return text
}

// seed writes a user, a conversation with a message and an audit record, with the columns every
// version has.
func seed(t *testing.T, db *sql.DB) {
	t.Helper()
	execAll(t, db,
		`INSERT INTO users (id, name, role, created_at) VALUES ('ana', 'ana', 'admin', 0)`,
		`INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at) VALUES ('c1', 'ana', 'zoo', 'idle', 1, 0, 0)`,
		`INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at) VALUES ('c1', 1, 'user_message', '', 'ana', '{"text":"zebras at dawn"}', 0)`,
		`INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at) VALUES ('c1', 'call_0', 't', 'ana', 'approve', '', 'h', 0)`,
		`INSERT INTO outbox (conversation_id, tool_call_id, to_addr, subject, body, created_at) VALUES ('c1', 'call_0', 'a@example.test', 's', 'b', 0)`,
	)
}

// checkSeeded checks that what seed wrote is there after the upgrade and that the store works
// on it: the old message is found, the next append is indexed, the old audit record chains.
func checkSeeded(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	if err := store.Ready(ctx, s); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	if hits, err := s.FindConversations(ctx, "ana", "zebras", 0); err != nil || len(hits) != 1 || hits[0].ID != "c1" {
		t.Fatalf("the old message after the upgrade: %v %+v", err, hits)
	}
	if _, err := s.Append(ctx, "c1", 1, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "ana",
		Data: []byte(`{"text":"lions at noon"}`)}}}); err != nil {
		t.Fatal(err)
	}
	if hits, err := s.FindConversations(ctx, "ana", "lions", 0); err != nil || len(hits) != 1 || hits[0].Seq != 2 {
		t.Fatalf("a message appended after the upgrade: %v %+v", err, hits)
	}
	if out, err := s.ListOutbox(ctx, "c1"); err != nil || len(out) != 1 {
		t.Fatalf("the old outbox message: %v %+v", err, out)
	}
	if err := s.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "ana", Action: "deny"}); err != nil {
		t.Fatalf("audit after the upgrade: %v", err)
	}
}

// TestUpgradeFromTheFirstMigrationEqualsFresh: a file that holds migration 001 and data is
// upgraded on open to the very schema a fresh file gets, sqlite_schema's text included.
func TestUpgradeFromTheFirstMigrationEqualsFresh(t *testing.T) {
	want := fresh(t)
	path := filepath.Join(t.TempDir(), "parley.db")
	db := rawFile(t, path)
	execAll(t, db, schemaMigrations[0].SQL, `PRAGMA user_version = 1`)
	seed(t, db)
	db.Close()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("open a file at version 1: %v", err)
	}
	checkSeeded(t, s)
	s.Close()
	got, v := dump(t, path)
	if v != schemaVersion {
		t.Fatalf("user_version after the upgrade = %d, want %d", v, schemaVersion)
	}
	if got != want {
		t.Fatalf("upgraded from 001, the schema differs from a fresh file's:\n%s", lineDiff(want, got))
	}
}

// TestUpgradeLegacySchemaFile: a file made by a binary from before the numbered migrations —
// the old schema.sql, user_version 8 — is taken as migration 017 (what its schema is), so its
// data stay and its schema matches a fresh file's, object by object (the text of its CREATE
// TABLE statements was written differently: comments, and columns written in place rather than
// added by ALTER TABLE).
func TestUpgradeLegacySchemaFile(t *testing.T) {
	want := normalizedSchema(t, fresh(t))
	path := filepath.Join(t.TempDir(), "parley.db")
	db := rawFile(t, path)
	execAll(t, db, legacySchema, `PRAGMA user_version = 8`)
	seed(t, db)
	execAll(t, db, `UPDATE conversations SET indexed_seq = 0`) // the message waits for the indexer
	db.Close()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("open a legacy version 8 file: %v", err)
	}
	if have, want, err := s.SchemaVersion(t.Context()); err != nil || have != want || want != schemaVersion {
		t.Fatalf("schema version = %d, %d, %v; want %d", have, want, err, schemaVersion)
	}
	checkSeeded(t, s)
	s.Close()
	text, _ := dump(t, path)
	if got := normalizedSchema(t, text); got != want {
		t.Fatalf("a legacy file upgraded differs from a fresh one:\n%s", lineDiff(want, got))
	}
}

// TestLegacyVersionsAreMigrations: each legacy version maps to a migration that does something
// on SQLite (the one that made that schema), in the same order; and every file migrate writes is
// at a version above the legacy count, so the two never meet (a binary from before reads it as
// newer than itself and refuses the file).
func TestLegacyVersionsAreMigrations(t *testing.T) {
	if schemaVersion <= len(legacyVersions) {
		t.Fatalf("schemaVersion %d is within the legacy versions 1-%d", schemaVersion, len(legacyVersions))
	}
	prev := 0
	for legacy := 1; legacy <= len(legacyVersions); legacy++ {
		v, ok := legacyVersions[legacy]
		if !ok || v <= prev || v > schemaVersion {
			t.Fatalf("legacy version %d maps to %d (after %d)", legacy, v, prev)
		}
		if m := schemaMigrations[v-1]; m.Version != v || !strings.Contains(stripComments(m.SQL), "CREATE") && !strings.Contains(stripComments(m.SQL), "ALTER") {
			t.Fatalf("legacy version %d maps to %s, which changes nothing", legacy, m.Name)
		}
		prev = v
	}
}

var (
	sqlComment = regexp.MustCompile(`--[^\n]*`)
	spaces     = regexp.MustCompile(`\s+`)
	punct      = regexp.MustCompile(`\s*([(),])\s*`)
)

func stripComments(s string) string { return sqlComment.ReplaceAllString(s, "") }

// normalizedSchema is a schemadump text with comments, quotes around names and layout removed:
// one statement per line, sorted.
func normalizedSchema(t *testing.T, text string) string {
	t.Helper()
	var out []string
	for _, st := range strings.Split(stripComments(text), ";\n") {
		st = strings.ReplaceAll(st, `"`, "")
		st = punct.ReplaceAllString(strings.TrimSpace(spaces.ReplaceAllString(st, " ")), "$1")
		if st != "" {
			out = append(out, st)
		}
	}
	return strings.Join(out, "\n")
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
