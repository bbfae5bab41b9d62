package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/sqlitestore"
)

// TestAuditCLI: web audit verify says the chain is intact, web audit export writes one JSON
// line per record in chain order, and after a record is changed behind the store's back verify
// exits 1 naming it. On both stores.
func TestAuditCLI(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			dir, url := t.TempDir(), ""
			if kind == "postgres" {
				url = pgtest.NewURL(t)
			}
			env := map[string]string{"PARLEY_DATA_DIR": dir, "DATABASE_URL": url, "PARLEY_MODEL": "demo"}
			getenv := func(k string) string { return env[k] }
			cfg, err := FromEnv(getenv)
			if err != nil {
				t.Fatal(err)
			}
			st, err := OpenStore(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			for _, action := range []string{"approve", "deny", "grant_revoke"} {
				if err := st.AppendAudit(ctx, store.AuditRecord{Tool: "t", ActorID: "u", Action: action, Reason: "r"}); err != nil {
					t.Fatal(err)
				}
			}
			tamper := func() {
				var err error
				switch s := st.(type) {
				case *sqlitestore.Store:
					_, err = s.DB.Exec(ctx, `UPDATE audit SET actor_id = 'mallory' WHERE chain_seq = 2`)
				case *pgstore.Store:
					_, err = s.Pool().Exec(ctx, `UPDATE audit SET actor_id = 'mallory' WHERE chain_seq = 2`)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if kind == "sqlite" {
				// The embedded store is one process's (flock): the CLI opens it after we close it.
				tamperLater := tamper
				tamper = func() {
					s, err := sqlitestore.Open(ctx, dir+"/parley.db")
					if err != nil {
						t.Fatal(err)
					}
					st = s
					tamperLater()
					s.Close()
				}
			}
			if kind == "sqlite" {
				st.Close()
			} else {
				defer st.Close()
			}
			run := func(args ...string) (int, string, string) {
				var out, errOut bytes.Buffer
				code := Main(ctx, args, getenv, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
				return code, out.String(), errOut.String()
			}
			if code, out, errOut := run("audit", "verify"); code != 0 || !strings.Contains(out, "intact: 3 records") {
				t.Fatalf("verify: %d %q %q", code, out, errOut)
			}
			code, out, errOut := run("audit", "export")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(lines) != 3 {
				t.Fatalf("export: %d %q %q", code, out, errOut)
			}
			var first struct {
				Seq    int64  `json:"seq"`
				Action string `json:"action"`
				Hash   string `json:"hash"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Seq != 1 || first.Action != "approve" || first.Hash == "" {
				t.Fatalf("first line %q: %v", lines[0], err)
			}
			tamper()
			if code, _, errOut := run("audit", "verify"); code != 1 || !strings.Contains(errOut, "audit record 2") {
				t.Fatalf("verify after tampering: %d %q", code, errOut)
			}
		})
	}
}
