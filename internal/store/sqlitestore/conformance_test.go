package sqlitestore_test

import (
	"path/filepath"
	"strings"
	"testing"

	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.PerTest(
		func(t *testing.T) string { return filepath.Join(t.TempDir(), "parley.db") },
		func(t *testing.T, path string) store.Store {
			s, err := sqlitestore.Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}),
		storetest.WithFailingAudit(failAudit), storetest.WithExec(execSQL))
}

// failAudit makes the file refuse audit records with the given action.
func failAudit(t *testing.T, s store.Store, action string) {
	t.Helper()
	ddl := `CREATE TRIGGER refuse_audit BEFORE INSERT ON audit WHEN NEW.action = '` + strings.ReplaceAll(action, "'", "''") + `'
		BEGIN SELECT RAISE(ABORT, 'audit action refused by the test trigger'); END`
	if _, err := s.(*sqlitestore.Store).DB.Exec(t.Context(), ddl); err != nil {
		t.Fatalf("install the audit trigger: %v", err)
	}
}

// execSQL runs a statement on the file directly.
func execSQL(t *testing.T, s store.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.(*sqlitestore.Store).DB.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}
