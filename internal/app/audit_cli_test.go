package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/sqlitestore"
	"parley/migrations"
)

// auditEnv is a configuration on a new store of kind (sqlite, postgres) with five audit records
// written the way `web serve` writes them: keyed with the configuration's key, each commit's head
// anchored in the anchor file.
type auditEnv struct {
	kind   string
	dir    string
	env    map[string]string
	cfg    Config
	getenv func(string) string
}

func newAuditEnv(t *testing.T, kind string, extra map[string]string) *auditEnv {
	t.Helper()
	ctx := context.Background()
	e := &auditEnv{kind: kind, dir: t.TempDir()}
	url := ""
	if kind == "postgres" {
		url = pgtest.NewURL(t)
	}
	e.env = map[string]string{"PARLEY_DATA_DIR": e.dir, "DATABASE_URL": url, "PARLEY_MODEL": "demo"}
	for k, v := range extra {
		e.env[k] = v
	}
	e.getenv = func(k string) string { return e.env[k] }
	cfg, err := FromEnv(e.getenv)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	anchor, closeAnchors, err := openAuditAnchors(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(ctx, cfg, log, anchor)
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"approve", "deny", "grant_revoke", "approve", "deny"} {
		if err := st.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "u", Action: action, Reason: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	closeAnchors()
	return e
}

// run runs the CLI with the environment's configuration.
func (e *auditEnv) run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, e.getenv, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	return code, out.String(), errOut.String()
}

// tamper runs statements on the database with the audit table's append-only triggers out of
// the way — what whoever owns the database (or can write the file) can do.
func (e *auditEnv) tamper(t *testing.T, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	switch e.kind {
	case "sqlite":
		// The embedded store is one process's (flock): opened here while the CLI does not run.
		s, err := sqlitestore.Open(ctx, e.cfg.sqlitePath())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, q := range append([]string{`DROP TRIGGER audit_no_update`, `DROP TRIGGER audit_no_delete`}, stmts...) {
			if _, err := s.DB.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	case "postgres":
		s, err := pgstore.Open(ctx, e.cfg.DatabaseURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, q := range append([]string{`ALTER TABLE audit DISABLE TRIGGER USER`}, stmts...) {
			if _, err := s.Pool().Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// rechain rewrites the records from place from on, changing the actor of the one at from, and
// links them again with the unkeyed SHA-256 of before the chain was keyed — all that someone
// without the key can compute. downgrade also marks them unkeyed.
func (e *auditEnv) rechain(t *testing.T, from int64, downgrade bool) {
	t.Helper()
	ctx := context.Background()
	st, err := openStoreKeyed(ctx, e.cfg, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := st.AuditChain(ctx, 0, 0)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	prev := ""
	for _, r := range chain {
		if r.Seq >= from {
			if r.Seq == from {
				r.ActorID = "mallory"
			}
			if downgrade {
				r.KeyID = ""
			}
			r.PrevHash = prev
			r.Hash = store.AuditHash(prev, r)
			stmts = append(stmts, "UPDATE audit SET actor_id = '"+r.ActorID+"', prev_hash = '"+r.PrevHash+"', hash = '"+r.Hash+
				"', key_id = '"+r.KeyID+"' WHERE chain_seq = "+itoa(r.Seq))
		}
		prev = r.Hash
	}
	e.tamper(t, stmts...)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestAuditCLI: web audit verify says the chain is intact and checked against its anchors; web
// audit export writes one JSON line per record in chain order. On both stores.
func TestAuditCLI(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e := newAuditEnv(t, kind, nil)
			code, out, errOut := e.run("audit", "verify")
			if code != 0 || !strings.Contains(out, "intact: 5 records") || !strings.Contains(out, "the newest, written at") ||
				!strings.Contains(out, "is record 5") || strings.Contains(errOut, "warning") {
				t.Fatalf("verify: %d %q %q", code, out, errOut)
			}
			code, out, errOut = e.run("audit", "export")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(lines) != 5 {
				t.Fatalf("export: %d %q %q", code, out, errOut)
			}
			var first struct {
				Seq    int64  `json:"seq"`
				Action string `json:"action"`
				Hash   string `json:"hash"`
				KeyID  string `json:"key_id"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Seq != 1 || first.Action != "approve" || first.Hash == "" || first.KeyID == "" {
				t.Fatalf("first line %q: %v", lines[0], err)
			}
			// The development key was generated once, beside the data, readable by its owner only.
			if fi, err := os.Stat(filepath.Join(e.dir, devAuditKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("the development key: %v %v", fi, err)
			}
		})
	}
}

// TestAuditVerifyFindsAttacks: each way of rewriting the trail that `web audit verify` used to
// miss makes it exit 1 naming the first record that differs or is missing, on both stores.
func TestAuditVerifyFindsAttacks(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			for _, tc := range []struct {
				name   string
				attack func(t *testing.T, e *auditEnv)
				want   []string
			}{
				{"the newest records deleted", func(t *testing.T, e *auditEnv) {
					e.tamper(t, `DELETE FROM audit WHERE chain_seq > 3`)
				}, []string{"audit record 4 ", "the newest records were removed"}},
				{"a record changed, the chain re-hashed the old unkeyed way", func(t *testing.T, e *auditEnv) {
					e.rechain(t, 2, false)
				}, []string{"audit record 2 ", "re-hashed without the key"}},
				{"a record changed, the rest passed off as written before the key", func(t *testing.T, e *auditEnv) {
					e.rechain(t, 2, true)
				}, []string{"audit record 2 ", "follows keyed records"}},
				{"the whole chain passed off as written before the key", func(t *testing.T, e *auditEnv) {
					e.rechain(t, 1, true)
				}, []string{"audit record 1 ", "only the first 0 records are"}},
				{"an anchor forged", func(t *testing.T, e *auditEnv) {
					path := filepath.Join(e.dir, devAuditAnchorFile)
					b, err := os.ReadFile(path)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, append(b, []byte(`{"v":1,"seq":2,"hash":"00","key_id":"x","legacy":0,"at":"2026-01-01T00:00:00Z","mac":"00"}`+"\n")...), 0o600); err != nil {
						t.Fatal(err)
					}
				}, []string{"anchor file", "signed with key x"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := newAuditEnv(t, kind, nil)
					tc.attack(t, e)
					code, out, errOut := e.run("audit", "verify")
					for _, w := range tc.want {
						if code != 1 || !strings.Contains(errOut, w) {
							t.Fatalf("verify after the attack: %d %q %q; want exit 1 and %q", code, out, errOut, w)
						}
					}
				})
			}
		})
	}
}

// TestAuditVerifyFindsParleyChainAudit: the attack of the issue on PostgreSQL — change a
// record, null its place and its successors', and have the database chain them again with
// parley_chain_audit (migration 008's, recreated by whoever can run DDL since 020 dropped it).
func TestAuditVerifyFindsParleyChainAudit(t *testing.T) {
	e := newAuditEnv(t, "postgres", nil)
	ms, err := migrations.Load(migrations.Postgres)
	if err != nil || len(ms) < 8 || ms[7].Version != 8 {
		t.Fatalf("migration 008: %v", err)
	}
	s := ms[7].SQL
	fns := s[strings.Index(s, "CREATE FUNCTION parley_audit_field"):strings.Index(s, "-- Remembered approvals.")]
	e.tamper(t,
		`ALTER TABLE audit ALTER COLUMN chain_seq DROP NOT NULL`,
		fns,
		`UPDATE audit SET actor_id = 'mallory' WHERE chain_seq = 2`,
		`UPDATE audit SET chain_seq = NULL WHERE chain_seq >= 2`,
		`SELECT parley_chain_audit()`,
	)
	code, out, errOut := e.run("audit", "verify")
	if code != 1 || !strings.Contains(errOut, "audit record 2 ") {
		t.Fatalf("verify after parley_chain_audit: %d %q %q; want exit 1 naming record 2", code, out, errOut)
	}
}

// TestAuditKeyConfiguration: production needs a key; a key shorter than 32 bytes, or two ways
// of giving one, are refused; a key given by file or variable is the one verify uses, and
// another key finds every keyed record foreign.
func TestAuditKeyConfiguration(t *testing.T) {
	if _, err := loadAuditKey(Config{Production: true}, nil, true); err == nil || !strings.Contains(err.Error(), "PARLEY_AUDIT_KEY") {
		t.Fatalf("production without a key: %v", err)
	}
	if _, err := FromEnv(func(k string) string {
		return map[string]string{"PARLEY_AUDIT_KEY": strings.Repeat("k", 32), "PARLEY_AUDIT_KEY_FILE": "/x"}[k]
	}); err == nil {
		t.Fatal("both PARLEY_AUDIT_KEY and PARLEY_AUDIT_KEY_FILE were accepted")
	}
	if _, err := loadAuditKey(Config{AuditKey: "short"}, nil, true); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("a short key: %v", err)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := loadAuditKey(Config{AuditKeyFile: keyFile, Production: true}, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	fromEnv, err := loadAuditKey(Config{AuditKey: strings.Repeat("s", 40), Production: true}, nil, true)
	if err != nil || fromEnv.ID() != fromFile.ID() {
		t.Fatalf("the same key by file and by variable: %v", err)
	}

	anchors := filepath.Join(t.TempDir(), "anchors.jsonl")
	e := newAuditEnv(t, "sqlite", map[string]string{"PARLEY_ENV": "production", "PARLEY_AUDIT_KEY_FILE": keyFile, "PARLEY_AUDIT_ANCHOR_FILE": anchors})
	if _, err := os.Stat(filepath.Join(e.dir, devAuditKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("a development key was made beside a configured one: %v", err)
	}
	if code, out, errOut := e.run("audit", "verify"); code != 0 || !strings.Contains(out, "intact: 5 records") {
		t.Fatalf("verify: %d %q %q", code, out, errOut)
	}
	e.env["PARLEY_AUDIT_KEY_FILE"] = ""
	e.env["PARLEY_AUDIT_KEY"] = strings.Repeat("x", 40)
	if code, _, errOut := e.run("audit", "verify"); code != 1 || !strings.Contains(errOut, "signed with key") {
		t.Fatalf("verify with another key: %d %q", code, errOut)
	}
	if code, _, errOut := e.run("audit", "verify", "--anchor", filepath.Join(t.TempDir(), "none.jsonl")); code != 1 ||
		!strings.Contains(errOut, "audit record 1 ") || !strings.Contains(errOut, "not the configured key") {
		t.Fatalf("verify with another key, no anchor: %d %q", code, errOut)
	}
}
