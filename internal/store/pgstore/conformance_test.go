package pgstore_test

import (
	"strings"
	"testing"

	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.PerTest(
		func(t *testing.T) string { return pgtest.NewURL(t) },
		func(t *testing.T, url string) store.Store {
			s, err := pgstore.Open(t.Context(), url, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}),
		storetest.WithFailingAudit(failAudit), storetest.WithExec(execSQL))
}

// failAudit makes the database refuse audit records with the given action.
func failAudit(t *testing.T, s store.Store, action string) {
	t.Helper()
	ddl := `CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'audit action % refused by the test trigger', NEW.action; END $$;
	CREATE TRIGGER refuse_audit BEFORE INSERT ON audit FOR EACH ROW
		WHEN (NEW.action = ` + pgQuote(action) + `) EXECUTE FUNCTION refuse_audit()`
	if _, err := s.(*pgstore.Store).Pool().Exec(t.Context(), ddl); err != nil {
		t.Fatalf("install the audit trigger: %v", err)
	}
}

// pgQuote is a PostgreSQL string literal (trigger conditions take no parameters).
func pgQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// execSQL runs a statement on the database directly.
func execSQL(t *testing.T, s store.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.(*pgstore.Store).Pool().Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}
