package schemadump_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"parley/internal/store/pgtest"
	"parley/migrations/schemadump"
)

// pgSchema is a schema with one of each kind of object the dump writes.
var pgSchema = []string{
	`CREATE TYPE mood AS ENUM ('calm', 'busy')`,
	`CREATE DOMAIN positive AS integer NOT NULL CHECK (VALUE > 0)`,
	`CREATE TYPE pair AS (a integer, b text)`,
	`CREATE SEQUENCE tickets START 10 INCREMENT 5`,
	`CREATE FUNCTION twice(x integer) RETURNS integer LANGUAGE sql IMMUTABLE RETURN x * 2`,
	`CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.n := twice(NEW.n); RETURN NEW; END $$`,
	`CREATE TABLE things (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		n positive,
		m mood NOT NULL DEFAULT 'calm',
		label text COLLATE "C" UNIQUE,
		doubled integer GENERATED ALWAYS AS (n * 2) STORED,
		ticket bigserial,
		CHECK (label <> '')
	) WITH (fillfactor = 80)`,
	`CREATE INDEX things_busy ON things (n DESC) WHERE m = 'busy'`,
	`CREATE TRIGGER things_touch BEFORE INSERT ON things FOR EACH ROW EXECUTE FUNCTION touch()`,
	`CREATE TABLE parts (k integer, v text) PARTITION BY RANGE (k)`,
	`CREATE UNLOGGED TABLE scratch (p pair, r integer REFERENCES things (id) ON DELETE CASCADE)`,
	`CREATE VIEW busy AS SELECT id, n FROM things WHERE m = 'busy'`,
}

func pgDump(t *testing.T, stmts []string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	text, err := schemadump.Postgres(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func TestPostgres(t *testing.T) {
	text := pgDump(t, pgSchema)
	for _, want := range []string{
		"CREATE TYPE mood AS ENUM ('calm', 'busy');",
		"CREATE DOMAIN positive AS integer NOT NULL CONSTRAINT positive_check CHECK ((VALUE > 0));",
		"CREATE TYPE pair AS (a integer, b text);",
		"CREATE SEQUENCE tickets AS bigint START 10 INCREMENT 5 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1;",
		"CREATE SEQUENCE things_ticket_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1 OWNED BY things.ticket;",
		"CREATE OR REPLACE FUNCTION public.twice(x integer)",
		"NEW.n := twice(NEW.n)",
		"\tid bigint GENERATED ALWAYS AS IDENTITY NOT NULL,\n",
		"\tm mood DEFAULT 'calm'::mood NOT NULL,\n",
		"\tlabel text COLLATE \"C\",\n",
		"\tdoubled integer GENERATED ALWAYS AS (((n)::integer * 2)) STORED,\n",
		"\tticket bigint DEFAULT nextval('things_ticket_seq'::regclass) NOT NULL,\n",
		"\tCONSTRAINT things_label_check CHECK ((label <> ''::text)),\n",
		"\tCONSTRAINT things_label_key UNIQUE (label),\n",
		") WITH (fillfactor=80);\n",
		"CREATE INDEX things_busy ON public.things USING btree (n DESC) WHERE (m = 'busy'::mood);\n",
		"CREATE TRIGGER things_touch BEFORE INSERT ON public.things FOR EACH ROW EXECUTE FUNCTION touch();\n",
		") PARTITION BY RANGE (k);\n",
		"CREATE UNLOGGED TABLE scratch (\n\tp pair,\n\tr integer,\n\tCONSTRAINT scratch_r_fkey FOREIGN KEY (r) REFERENCES things(id) ON DELETE CASCADE\n);",
		"CREATE VIEW busy AS\n SELECT ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the dump lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "things_id_seq") {
		t.Errorf("the identity column's sequence is dumped on its own:\n%s", text)
	}
	// The same schema made in another order dumps the same.
	other := append([]string{pgSchema[1], pgSchema[0], pgSchema[3], pgSchema[2], pgSchema[5], pgSchema[4]}, pgSchema[6:]...)
	if got := pgDump(t, other); got != text {
		t.Errorf("the same schema made in another order dumps differently:\n%s\n---\n%s", text, got)
	}
}

func TestSQLite(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		`CREATE TABLE b (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)`,
		`CREATE VIRTUAL TABLE b_search USING fts5 (body, content = 'b', content_rowid = 'id')`,
		`CREATE TRIGGER b_ai AFTER INSERT ON b BEGIN INSERT INTO b_search (rowid, body) VALUES (new.id, new.body); END`,
		`CREATE INDEX b_body ON b (body)`,
		`CREATE TABLE a (k TEXT PRIMARY KEY, v TEXT UNIQUE)`,
		`CREATE VIEW av AS SELECT k FROM a`,
		`INSERT INTO b (body) VALUES ('x')`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	got, err := schemadump.SQLite(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	want := `CREATE TABLE a (k TEXT PRIMARY KEY, v TEXT UNIQUE);

CREATE VIEW av AS SELECT k FROM a;

CREATE TABLE b (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT);
CREATE INDEX b_body ON b (body);
CREATE TRIGGER b_ai AFTER INSERT ON b BEGIN INSERT INTO b_search (rowid, body) VALUES (new.id, new.body); END;

CREATE VIRTUAL TABLE b_search USING fts5 (body, content = 'b', content_rowid = 'id');
`
	if got != want {
		t.Errorf("SQLite dump =\n%s\nwant\n%s", got, want)
	}
}
