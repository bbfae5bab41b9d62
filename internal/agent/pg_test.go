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

// openPG opens a PostgreSQL store on a fresh database (dropped when the test ends).
func openPG(t testing.TB, clk clock.Clock) store.Store {
	t.Helper()
	st, err := pgstore.Open(context.Background(), pgtest.NewURL(t), slog.New(slog.NewTextHandler(io.Discard, nil)), pgstore.WithClock(clk))
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
