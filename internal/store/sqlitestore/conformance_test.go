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
			s, err := sqlitestore.Open(t.Context(), path, sqlitestore.WithAuditKey(storetest.AuditKey))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}),
		storetest.WithFailingAudit(failAudit), storetest.WithExec(execSQL), storetest.WithTamper(tamperSQL))
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
func execSQL(t *testing.T, s store.Store, sql string, args ...any) error {
	t.Helper()
	_, err := s.(*sqlitestore.Store).DB.Exec(t.Context(), sql, args...)
	return err
}

// tamperSQL runs a statement on the file with the audit table's triggers dropped, as whoever can
// write the file can.
func tamperSQL(t *testing.T, s store.Store, sql string, args ...any) {
	t.Helper()
	db := s.(*sqlitestore.Store).DB
	for _, q := range []string{`DROP TRIGGER IF EXISTS audit_no_update`, `DROP TRIGGER IF EXISTS audit_no_delete`} {
		if _, err := db.Exec(t.Context(), q); err != nil {
			t.Fatalf("tamper: %s: %v", q, err)
		}
	}
	if _, err := db.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("tamper: %s: %v", sql, err)
	}
}
