package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"parley/internal/store"
)

// TestAppendIsFencedByTheLastClaim: once another process claimed a conversation (its name in
// conversations.owner_node, as parley_claim records it), an append of the process that owned
// it before is refused with ErrNotOwner and writes nothing — alone or in a group, where the
// others' appends still go through; the new owner's appends go on, and a store that names no
// writer is not checked.
func TestAppendIsFencedByTheLastClaim(t *testing.T) {
	ctx := t.Context()
	s, ids := groupFixture(t, 3)
	s.SetWriter("node-a")
	for _, id := range ids {
		if _, err := s.Append(ctx, id, 0, textBatch("before")); err != nil { // no claim recorded: not checked
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `UPDATE conversations SET owner_node = 'node-b' WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, ids[1], 1, textBatch("stale owner")); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("the old owner's append: err = %v, want ErrNotOwner", err)
	}
	reqs := []*appendReq{newReq(ctx, s, ids[0], 1, textBatch("a")), newReq(ctx, s, ids[1], 1, textBatch("stale owner")), newReq(ctx, s, ids[2], 1, textBatch("c"))}
	s.commitGroup(ctx, take(slices.Clone(reqs), 0))
	for i, r := range reqs {
		err := <-r.done
		if want := i == 1; errors.Is(err, store.ErrNotOwner) != want || (!want && err != nil) {
			t.Errorf("append %d in a group: err = %v", i, err)
		}
	}
	for i, want := range [][]string{{`{"text":"before"}`, `{"text":"a"}`}, {`{"text":"before"}`}, {`{"text":"before"}`, `{"text":"c"}`}} {
		if got := logTexts(t, s, ids[i]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("conversation %d log = %q, want %q", i, got, want)
		}
	}
	s.SetWriter("node-b")
	if _, err := s.Append(ctx, ids[1], 1, textBatch("new owner")); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	s.SetWriter("")
	if _, err := s.Append(ctx, ids[1], 2, textBatch("unchecked")); err != nil {
		t.Fatalf("an append naming no writer: %v", err)
	}
	// A stale sequence is still a conflict, whoever writes.
	if _, err := s.Append(ctx, ids[1], 1, textBatch("late")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale sequence: err = %v, want ErrConflict", err)
	}
}
