package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"parley/internal/store"
)

// addOthers writes n conversations of n other owners, each with one message holding words that
// share the prefix "budg" (budget<i>: a distinct word each, so a prefix walks n terms), and
// indexes them: what another owner's data puts in one owner's way.
func addOthers(ctx context.Context, tb testing.TB, s *Store, n int) {
	tb.Helper()
	for _, q := range []string{
		`INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at)
			WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
			SELECT 'other-' || i, 'other-' || i, 'untitled', 'idle', 1, 0, 0 FROM n`,
		`INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at)
			WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1)
			SELECT 'other-' || i, 1, 'user_message', '', 'other', '{"text":"the budget' || i || ' budgeting plan for q3"}', 0 FROM n`,
	} {
		if _, err := s.DB.Exec(ctx, q, n); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.d.indexScan(ctx); err != nil {
		tb.Fatal(err)
	}
}

// addMine gives owner n conversations, each with one message that matches "budg".
func addMine(ctx context.Context, tb testing.TB, s *Store, owner string, n int) {
	tb.Helper()
	for k := range n {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: owner, Title: "mine"})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: owner,
			Data: fmt.Appendf(nil, `{"text":"my budget%d for the trip"}`, k)}}}); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestSearchIsScopedToItsOwner: 2,000 other owners' messages sharing the searched prefix are
// never found, and one owner's search reads only that owner's entries of the index.
func TestSearchIsScopedToItsOwner(t *testing.T) {
	s, _ := openFake(t, filepath.Join(t.TempDir(), "parley.db"))
	ctx := t.Context()
	addOthers(ctx, t, s, 2000)
	addMine(ctx, t, s, "ana", 3)
	for _, q := range []string{"budg", "budget1", "budgeting plan", "q3"} {
		hits := find(t, s, "ana", q)
		for _, h := range hits {
			if h.OwnerID != "ana" {
				t.Errorf("FindConversations(ana, %q) found %s's conversation", q, h.OwnerID)
			}
		}
		if q == "budg" && len(hits) != 3 {
			t.Errorf("FindConversations(ana, %q) = %d hits, want ana's 3", q, len(hits))
		}
	}
	if hits := find(t, s, "other-7", "budg"); len(hits) != 1 || hits[0].ID != "other-7" {
		t.Errorf("FindConversations(other-7, budg) = %+v, want its one conversation", hits)
	}
}

// BenchmarkSearchOthers measures one owner's prefix search ("budg": 50 of the owner's messages
// match) beside Others messages of other owners that share the prefix, each a distinct word.
// A search scoped to its owner before it matches costs the same whatever Others is.
//
//	go test -run '^$' -bench SearchOthers -benchtime 200x ./internal/store/sqlitestore
func BenchmarkSearchOthers(b *testing.B) {
	ctx := context.Background()
	for _, others := range []int{0, 2000, 20000} {
		b.Run(fmt.Sprintf("Others=%d", others), func(b *testing.B) {
			s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			if others > 0 {
				addOthers(ctx, b, s, others)
			}
			addMine(ctx, b, s, "me", 50)
			if _, err := s.FindConversations(ctx, "me", "warmup", 1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				hits, err := s.FindConversations(ctx, "me", "budg", 50)
				if err != nil || len(hits) != 50 {
					b.Fatalf("search: %v, %d hits", err, len(hits))
				}
			}
		})
	}
}

// TestExcerpt: an excerpt shows the words around the first match, every matching word marked
// (whole, or as a prefix of at least sqlcore.MinPrefix characters), "…" where the message goes
// on, a word cut by the window's edge left out, and stays short whatever the window holds.
func TestExcerpt(t *testing.T) {
	const m, e = store.SnippetMark, store.SnippetEnd
	long := strings.Repeat("x", 3000)
	words := strings.Repeat("w ", 40)
	for _, tc := range []struct {
		name, window string
		words        []string
		want         string
	}{
		{"whole text", "Sure.", []string{"sur"}, m + "Sure" + e + "."},
		{"opening punctuation kept", `"Budget" now`, []string{"budget"}, `"` + m + "Budget" + e + `" now`},
		{"every match marked", "the budget and the budgets", []string{"budget"}, "the " + m + "budget" + e + " and the " + m + "budgets" + e},
		{"short words whole only", "q3 q30", []string{"q3"}, m + "q3" + e + " q30"},
		{"cut before: a partial word dropped", m + "dget plan budget", []string{"budget"}, "… plan " + m + "budget" + e},
		{"cut after", "budget " + strings.Repeat("a", store.SnippetWindow), []string{"budget"}, m + "budget" + e + " …"},
		{"words after the match bounded", "budget " + words, []string{"budget"}, m + "budget" + e + " " + strings.Repeat("w ", store.SnippetWords-2) + "w …"},
		{"words before the match bounded", words + "budget", []string{"budget"}, "… " + strings.Repeat("w ", excerptBefore) + m + "budget" + e},
		{"a long word clipped", long + " budget", []string{"budget"}, clip(long) + " " + m + "budget" + e},
		{"no match shown from the start", "nothing here", []string{"zzz"}, "nothing here"},
	} {
		if got := excerpt(tc.window, tc.words); got != tc.want {
			t.Errorf("%s: excerpt(%q, %q) = %q, want %q", tc.name, tc.window, tc.words, got, tc.want)
		}
	}
	if got := excerpt(strings.Repeat(long+" ", 10), []string{"xxx"}); len(got) > 600 {
		t.Errorf("an excerpt of long words is %d bytes", len(got))
	}
}
