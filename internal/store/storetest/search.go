package storetest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"parley/internal/store"
)

// testFindConversations: search finds a conversation by its title or by one of its messages
// (every word in one message, each also as a prefix, ignoring case, Unicode included), names the
// most recent matching message with an excerpt whose only markers are around matched words,
// never looks at tool calls or someone else's conversations, treats operators as text, bounds
// what it indexes without ever failing an append, and forgets a deleted conversation.
func testFindConversations(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	msg := func(typ store.EntryType, text string) store.Entry {
		b, _ := json.Marshal(map[string]string{"text": text})
		return store.Entry{Type: typ, Actor: "ana", Data: b}
	}
	titled := newConv(t, s, "ana", "Hotel ideas")
	trip := newConv(t, s, "ana", "Trip")
	must(s.Append(ctx, trip.ID, 0, store.Batch{Entries: []store.Entry{
		msg(store.EntryUserMessage, "Book the Zürich hotel for Q3, please"),                                                 // 1
		msg(store.EntryAssistantMessage, "Done: the **hotel** in ZÜRICH is booked. <script>x</script> \x02hotel\x03 trick"), // 2
		{Type: store.EntryToolCall, ToolCallID: "c1", Actor: "model", Data: json.RawMessage(`{"text":"secretword hotel"}`)}, // 3: not a message
		msg(store.EntryUserMessage, "thanks"), // 4
	}}))(t)
	bobs := newConv(t, s, "bob", "Bob")
	must(s.Append(ctx, bobs.ID, 0, store.Batch{Entries: []store.Entry{msg(store.EntryUserMessage, "hotel in Zürich")}}))(t)

	type hit struct {
		id  string
		seq int64
	}
	find := func(q string) []store.SearchHit {
		t.Helper()
		hits, err := s.FindConversations(ctx, "ana", q, 0)
		if err != nil {
			t.Fatalf("FindConversations(ana, %q): %v", q, err)
		}
		return hits
	}
	marked := regexp.MustCompile(store.SnippetMark + `[^` + store.SnippetMark + store.SnippetEnd + `]*` + store.SnippetEnd)
	for _, tc := range []struct {
		q    string
		want []hit
	}{
		{"hotel", []hit{{trip.ID, 2}, {titled.ID, 0}}}, // the most recent matching message; a title
		{"HOT", []hit{{trip.ID, 2}, {titled.ID, 0}}},   // a prefix, case ignored
		{"zürich", []hit{{trip.ID, 2}}},                // Unicode, case folded
		{"q3 hotel", []hit{{trip.ID, 1}}},              // every word in one message
		{"hotel thanks", []hit{}},                      // … not spread over several
		{"secretword", []hit{}},                        // tool calls are not messages
		{`hotel & !x | "q3`, []hit{}},                  // operators are text: words hotel, x, q3
		{"hotel AND NOT thanks", []hit{}},              // … in every syntax
		{"ideas", []hit{{titled.ID, 0}}},               // a title only
		{"%%", []hit{}},                                // no word: titles only
		{"script", []hit{{trip.ID, 2}}},                // raw HTML is text
		{"a٣b 日本語 x½y ﬁx 𝔘", []hit{}},                  // scripts and characters the stores split differently: no error
	} {
		got := []hit{}
		for _, h := range find(tc.q) {
			got = append(got, hit{h.ID, h.Seq})
			if h.OwnerID != "ana" {
				t.Errorf("FindConversations(ana, %q) found %s's conversation", tc.q, h.OwnerID)
			}
			if h.Seq == 0 && h.Snippet != "" {
				t.Errorf("FindConversations(ana, %q): a title hit with an excerpt %q", tc.q, h.Snippet)
			}
			if h.Seq != 0 {
				if h.Snippet == "" || len(h.Snippet) > 1000 {
					t.Errorf("FindConversations(ana, %q): excerpt %q is empty or unbounded", tc.q, h.Snippet)
				}
				if rest := marked.ReplaceAllString(h.Snippet, ""); strings.ContainsAny(rest, store.SnippetMark+store.SnippetEnd) {
					t.Errorf("FindConversations(ana, %q): excerpt %q holds markers that are not around a match", tc.q, h.Snippet)
				}
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("FindConversations(ana, %q) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if h := find("book"); len(h) != 1 || !strings.Contains(h[0].Snippet, store.SnippetMark+"booked"+store.SnippetEnd) {
		t.Errorf("excerpt of \"booked\" = %+v", h)
	}
	if got := must(s.FindConversations(ctx, "ana", "hotel", 1))(t); len(got) != 1 || got[0].ID != trip.ID {
		t.Errorf("FindConversations with limit 1 = %+v", got)
	}

	// A long message is appended whole; its first MaxIndexedText characters are searched.
	var long strings.Builder
	for i := 0; long.Len() < 3*store.MaxIndexedText; i++ {
		fmt.Fprintf(&long, "w%d ", i)
	}
	long.WriteString("farawayword")
	big := newConv(t, s, "ana", "Big")
	must(s.Append(ctx, big.ID, 0, store.Batch{Entries: []store.Entry{msg(store.EntryAssistantMessage, long.String())}}))(t)
	if h := find("w1234"); len(h) != 1 || h[0].ID != big.ID {
		t.Errorf("a word early in a long message: %+v", h)
	}
	if h := find("farawayword"); len(h) != 0 {
		t.Errorf("a word past MaxIndexedText was indexed: %+v", h)
	}
	// The excerpt is made from a window of the message placed at its match: a word far past
	// the window's width from the start is shown, marked, and the excerpt stays short.
	if h := find("w9876"); len(h) != 1 || !strings.Contains(h[0].Snippet, store.SnippetMark+"w9876"+store.SnippetEnd) || len(h[0].Snippet) > 600 {
		t.Errorf("the excerpt of a word deep in a long message = %+v", h)
	}

	// Deleting a conversation takes its messages out of the search.
	if err := s.DeleteConversation(ctx, trip.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"}); err != nil {
		t.Fatal(err)
	}
	if h := find("zürich"); len(h) != 0 {
		t.Errorf("a deleted conversation is still found: %+v", h)
	}
}

// SearchTimeout checks a store opened with a search timeout far shorter than its searches take
// (1 ms): a search of many long messages is stopped, and says so with store.ErrSearchTimeout,
// not as a failure of the store; the store then serves the next request as usual.
func SearchTimeout(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	text := strings.Repeat("lorem ipsum dolor sit amet ", store.MaxIndexedText/27) + " budget"
	data, _ := json.Marshal(map[string]string{"text": text})
	for range 40 {
		c := newConv(t, s, "ana", "long")
		must(s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryAssistantMessage, Actor: "model", Data: data}}}))(t)
	}
	_, err := s.FindConversations(ctx, "ana", "budget lorem", 0)
	wantErr(t, err, store.ErrSearchTimeout, "a search past its timeout")
	if got := must(s.ListConversations(ctx, "ana"))(t); len(got) != 40 {
		t.Fatalf("after a stopped search the store lists %d conversations, want 40", len(got))
	}
}
