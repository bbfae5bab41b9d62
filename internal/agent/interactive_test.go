package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"parley/internal/clock"
	"parley/internal/store"
)

// lanes records, for every append, its entry types and whether it was marked interactive.
type lanes struct {
	store.Store
	mu  sync.Mutex
	got []string
}

func (l *lanes) Append(ctx context.Context, conversationID string, afterSeq int64, b store.Batch) (int64, error) {
	types := make([]string, len(b.Entries))
	for i, e := range b.Entries {
		types[i] = string(e.Type)
	}
	l.mu.Lock()
	l.got = append(l.got, fmt.Sprintf("%s interactive=%v", strings.Join(types, "+"), b.Interactive))
	l.mu.Unlock()
	return l.Store.Append(ctx, conversationID, afterSeq, b)
}

func (l *lanes) appends() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// Only the appends a person waits on take the interactive lane: the sent message and the
// resolve's decision or answer. The model's output and the tools' results are background work.
func TestInteractiveMarksOnlyWhatAPersonWaitsOn(t *testing.T) {
	cases := []struct {
		name    string
		call    tc
		resolve Resolution
		want    []string
	}{
		{"approve", tc{"c1", "send_email", emailArgs}, Resolution{Decision: "approve"}, []string{
			"user_message interactive=true",
			"assistant_message+tool_call interactive=false",
			"decision interactive=true",
			"tool_result interactive=false",
			"assistant_message interactive=false",
		}},
		{"deny", tc{"c1", "send_email", emailArgs}, Resolution{Decision: "deny"}, []string{
			"user_message interactive=true",
			"assistant_message+tool_call interactive=false",
			"decision+tool_error interactive=true",
			"assistant_message interactive=false",
		}},
		{"answer", tc{"c1", "ask_user", askArgs}, Resolution{Action: "decline"}, []string{
			"user_message interactive=true",
			"assistant_message+tool_call interactive=false",
			"tool_error interactive=true",
			"assistant_message interactive=false",
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			rec := &lanes{}
			open := func(tb testing.TB, clk clock.Clock) store.Store {
				rec.Store = storeKinds[0].open(tb, clk)
				return rec
			}
			e := newEnv(t, open, newScripted(callTools(tt.call), say("Done.")), emailTools, nil)
			e.send("go")
			e.waitCall("c1", store.CallAwaiting)
			if err := e.m.Resolve(e.ctx, e.conv, "c1", tt.resolve, e.owner); err != nil {
				t.Fatalf("resolve: %v", err)
			}
			e.waitStatus(store.StatusIdle)
			got := rec.appends()
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("appends:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
