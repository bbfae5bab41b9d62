package sqlitestore_test

import (
	"path/filepath"
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
		}))
}
