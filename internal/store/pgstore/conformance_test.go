package pgstore_test

import (
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
		}))
}
