package pgstore_test

import (
	"context"
	"testing"

	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/storetest"
)

// BenchmarkStore measures the store against its floor: BareInsertCommit is one single-row
// INSERT committed (autocommit) on the same database, through the same pool.
//
//	go test -run '^$' -bench . -count 5 ./internal/store/pgstore
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgtest.NewURL(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id text NOT NULL, data json)`); err != nil {
		b.Fatal(err)
	}
	storetest.Bench(b, s, func(ctx context.Context) error {
		_, err := s.Pool().Exec(ctx, `INSERT INTO bare (conversation_id, data) VALUES ($1, $2)`, "bench", []byte(storetest.BareRow))
		return err
	})
}
