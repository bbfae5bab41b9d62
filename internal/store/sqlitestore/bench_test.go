package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"parley/internal/store/sqlitestore"
	"parley/internal/store/storetest"
)

// BenchmarkStore measures the embedded store against its floor: BareInsertCommit is one
// single-row INSERT committed on the same file, through the same writer connection.
//
//	go test -run '^$' -bench . -count 5 ./internal/store/sqlitestore
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB.Exec(ctx, `CREATE TABLE bare (id INTEGER PRIMARY KEY, conversation_id TEXT NOT NULL, data BLOB)`); err != nil {
		b.Fatal(err)
	}
	storetest.Bench(b, s, func(ctx context.Context) error {
		_, err := s.DB.Exec(ctx, `INSERT INTO bare (conversation_id, data) VALUES ($1, $2)`, "bench", []byte(storetest.BareRow))
		return err
	})
}
