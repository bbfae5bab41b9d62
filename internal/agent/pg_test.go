package agent

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

// pgMigrated is a database with the migrations applied, made once for the package: each
// PostgreSQL test gets a copy rather than migrating a database of its own (TestMain drops it).
var pgMigrated = pgtest.NewTemplate(func(ctx context.Context, dsn string) error {
	st, err := pgstore.Open(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	return st.Close()
})

// openPG opens a PostgreSQL store on a fresh database, a copy of pgMigrated (dropped when the
// test ends).
func openPG(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	st, err := pgstore.Open(context.Background(), pgMigrated.NewURL(t), slog.New(slog.NewTextHandler(io.Discard, nil)), pgstore.WithClock(clk))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func init() {
	storeKinds = append(storeKinds, struct {
		name string
		open func(t testing.TB, clk clock.Clock) store.Store
	}{"postgres", openPG})
}
