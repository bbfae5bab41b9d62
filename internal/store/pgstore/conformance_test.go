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
			s, err := pgstore.Open(t.Context(), url, nil, pgstore.WithAuditKey(storetest.AuditKey))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}),
		storetest.WithFailingAudit(failAudit), storetest.WithExec(execSQL), storetest.WithTamper(tamperSQL))
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
func execSQL(t *testing.T, s store.Store, sql string, args ...any) error {
	t.Helper()
	_, err := s.(*pgstore.Store).Pool().Exec(t.Context(), sql, args...)
	return err
}

// tamperSQL runs a statement on the database with the audit table's triggers disabled, as its
// owner can, in one transaction.
func tamperSQL(t *testing.T, s store.Store, sql string, args ...any) {
	t.Helper()
	ctx := t.Context()
	tx, err := s.(*pgstore.Store).Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, q := range []string{`ALTER TABLE audit DISABLE TRIGGER USER`, sql, `ALTER TABLE audit ENABLE TRIGGER USER`} {
		a := args
		if q != sql {
			a = nil
		}
		if _, err := tx.Exec(ctx, q, a...); err != nil {
			t.Fatalf("tamper: %s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
