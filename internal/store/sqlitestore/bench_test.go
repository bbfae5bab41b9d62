package sqlitestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
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

// BenchmarkSearchBacklog measures a search (FindConversations) that finds N messages appended
// since the last search and not yet indexed: the search indexes them before it reads
// (index.go). The background indexer is held still by a fake clock, so the search does all the
// indexing. Backlog=0 is the search alone; (Backlog=N − Backlog=0) / N is what indexing costs
// a message when N are indexed together. Conversations=1000 is a search with no backlog by an
// owner of 1,000 conversations (a search checks each of its owner's conversations for pending
// messages).
//
//	go test -run '^$' -bench SearchBacklog ./internal/store/sqlitestore
func BenchmarkSearchBacklog(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) *sqlitestore.Store {
		s, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlitestore.WithClock(clock.NewFake(time.Now())))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	message := func(text string) store.Batch {
		return store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "bench",
			Data: json.RawMessage(`{"text":"` + text + ` ` + strings.Repeat("lorem ipsum ", 16) + `"}`)}}}
	}
	for _, n := range []int{0, 1, 100, 1000} {
		b.Run(fmt.Sprintf("Backlog=%d", n), func(b *testing.B) {
			s := open(b)
			c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "bench", Title: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			var seq int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for k := range max(n, 1) {
					if seq, err = s.Append(ctx, c.ID, seq, message(fmt.Sprintf("needle%dx%d", i, k))); err != nil {
						b.Fatal(err)
					}
				}
				if n == 0 { // indexed before the timer starts
					if _, err := s.FindConversations(ctx, "bench", "warmup", 1); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				hits, err := s.FindConversations(ctx, "bench", fmt.Sprintf("needle%dx0", i), 0)
				if err != nil || len(hits) != 1 {
					b.Fatalf("search: %v %+v", err, hits)
				}
			}
		})
	}
	b.Run("Backlog=0/Conversations=1000", func(b *testing.B) {
		s := open(b)
		for k := range 1000 {
			c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "bench", Title: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Append(ctx, c.ID, 0, message(fmt.Sprintf("needle%dz", k))); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.FindConversations(ctx, "bench", "warmup", 1); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			hits, err := s.FindConversations(ctx, "bench", fmt.Sprintf("needle%dz", i%1000), 0)
			if err != nil || len(hits) != 1 {
				b.Fatalf("search: %v %+v", err, hits)
			}
		}
	})
}
