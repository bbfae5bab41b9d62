package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"parley/internal/clock"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// runaway streams deltas of chunk for ever (or until n of them), then answers with the whole
// text and a call. obey: it stops at the first refused delta, as the providers do; otherwise
// it goes on streaming and answers anyway, as a broken or hostile one would.
func runaway(chunk string, n int, obey bool) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		var all strings.Builder
		for range n {
			if err := emit(llm.Event{Type: llm.EventTextDelta, Text: chunk}); err != nil && obey {
				return llm.Response{}, err
			}
			all.WriteString(chunk)
		}
		return llm.Response{Text: all.String(), StopReason: "tool_calls",
			ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lookup", Args: json.RawMessage(`{"n":1}`)}}}, nil
	}
}

// whole answers with text at once, without streaming it.
func whole(text string) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		return llm.Response{Text: text, StopReason: "stop"}, nil
	}
}

// TestAnswerIsCutAtItsBound: a model that streams more than MaxAnswerBytes is cut there. The
// subscribers got exactly the text kept (never more than the bound, cut on a rune boundary);
// that text is the assistant's message; the turn ends with a too_large error the person sees;
// no call of the cut answer runs and the model is not called again in the turn; the next
// message goes on from it, the model seeing the text it had written.
func TestAnswerIsCutAtItsBound(t *testing.T) {
	const bound = 4096
	chunk := strings.Repeat("é", 150) + "\n" // 301 bytes: the bound falls inside a two-byte rune
	for _, tc := range []struct {
		name string
		step step
	}{
		{"the provider stops when refused", runaway(chunk, 1000, true)},
		{"the provider goes on regardless", runaway(chunk, 1000, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
				var runs counter
				prov := newScripted(tc.step, say("Here is the rest."))
				e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{lookupTool(t, &runs)} },
					func(c *Config) { c.MaxAnswerBytes = bound })
				e.send("write for ever")
				var streamed strings.Builder
				ev := e.next("the turn error", func(ev Event) bool {
					if ev.Type == EventTextDelta {
						streamed.WriteString(ev.Text)
					}
					return ev.Type == EventError
				})
				if !strings.Contains(string(ev.Data), `"too_large"`) || !strings.Contains(ev.Text, "cut off") || !strings.Contains(ev.Text, "passed 4 KiB") {
					t.Errorf("turn error = %+v", ev)
				}
				got := streamed.String()
				if len(got) > bound || len(got) < bound-1 || !utf8.ValidString(got) || !strings.HasPrefix(strings.Repeat(chunk, 20), got) {
					t.Fatalf("streamed %d bytes (valid %v), want the first %d bytes of the answer cut on a rune", len(got), utf8.ValidString(got), bound)
				}
				e.waitStatus(store.StatusIdle)
				v := e.view()
				n := len(v.Messages)
				if n < 3 || v.Messages[n-2].Role != "assistant" || v.Messages[n-2].Content != got || v.Messages[n-1].Role != "error" || v.LastError != ev.Text {
					t.Fatalf("messages after the cut: %d, last two %+v", n, v.Messages[max(n-2, 0):])
				}
				if v.Streaming != "" || len(v.Calls) != 0 || len(runs.list()) != 0 {
					t.Errorf("after the cut: streaming %d bytes, calls %+v, runs %v", len(v.Streaming), v.Calls, runs.list())
				}
				if c := len(prov.requests()); c != 1 {
					t.Errorf("%d model calls in the cut turn, want 1", c)
				}
				// The conversation goes on, and the model sees what it had written.
				e.send("go on")
				e.waitStatus(store.StatusIdle)
				reqs := prov.requests()
				if len(reqs) != 2 {
					t.Fatalf("%d model calls, want 2", len(reqs))
				}
				seen := false
				for _, m := range reqs[1].Messages {
					seen = seen || (m.Role == llm.RoleAssistant && m.Content == got)
				}
				if !seen {
					t.Errorf("the next request does not hold the cut answer")
				}
				if v := e.view(); v.LastError != "" || v.Messages[len(v.Messages)-1].Content != "Here is the rest." {
					t.Errorf("after going on: %+v", v.Messages[len(v.Messages)-1])
				}
			})
		})
	}
}

// TestWholeAnswerIsCutAtItsBound: an answer handed whole (no deltas) past the bound is cut too.
func TestWholeAnswerIsCutAtItsBound(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(whole(strings.Repeat("word ", 1000)))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return nil },
			func(c *Config) { c.MaxAnswerBytes = 1000 })
		e.send("talk")
		e.next("the turn error", func(ev Event) bool { return ev.Type == EventError })
		e.waitStatus(store.StatusIdle)
		v := e.view()
		n := len(v.Messages)
		a := v.Messages[n-2]
		if a.Role != "assistant" || len(a.Content) > 1000 || !strings.HasSuffix(a.Content, "…") || !strings.HasPrefix(a.Content, "word word") {
			t.Errorf("assistant message: %d bytes %q…", len(a.Content), a.Content[:min(len(a.Content), 20)])
		}
		if v.Messages[n-1].Role != "error" {
			t.Errorf("no error after the cut answer: %+v", v.Messages[n-1])
		}
	})
}

func TestMaxAnswerBytesDefault(t *testing.T) {
	base := Config{Store: fakeStoreForDefaults{}, Provider: newScripted(), Tools: &tools.Registry{}}
	for _, tc := range []struct{ maxTokens, set, want int }{
		{0, 0, DefaultMaxAnswerBytes},       // max_tokens 4096: 32 KiB is less than the default
		{64_000, 0, 8 * 64_000},             // a larger max_tokens raises it
		{64_000, 10_000, 10_000},            // a bound set is kept
		{0, -1, DefaultMaxAnswerBytes},      // nonsense is the default
		{100, 0, DefaultMaxAnswerBytes},     // never below the default
		{DefaultMaxAnswerBytes, 0, 1 << 20}, // 128 Ki tokens: 1 MiB
	} {
		c := base
		c.MaxTokens, c.MaxAnswerBytes = tc.maxTokens, tc.set
		got, err := c.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got.MaxAnswerBytes != tc.want {
			t.Errorf("MaxTokens %d, MaxAnswerBytes %d: bound %d, want %d", tc.maxTokens, tc.set, got.MaxAnswerBytes, tc.want)
		}
	}
}

// fakeStoreForDefaults satisfies Config's required Store for withDefaults, which never uses it.
type fakeStoreForDefaults struct{ store.Store }

// TestDeltasCarryTheirAnswerAndOffset: each text delta names its answer (Seq, the view's
// StreamSeq while it streams) and where its text starts in the answer (Offset); the next model
// call of the turn is another answer, with a greater Seq; the view has no StreamSeq once the
// answer is logged.
func TestDeltasCarryTheirAnswerAndOffset(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		release := make(chan struct{})
		first := func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
			for _, d := range []string{"Hel", "lo"} {
				if err := emit(llm.Event{Type: llm.EventTextDelta, Text: d}); err != nil {
					return llm.Response{}, err
				}
			}
			<-release
			return llm.Response{Text: "Hello", StopReason: "tool_calls",
				ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lookup", Args: json.RawMessage(`{"n":1}`)}}}, nil
		}
		prov := newScripted(first, say("Done!"))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{lookupTool(t, nil)} }, nil)
		e.send("hi")
		type delta struct {
			seq    int64
			offset int
			text   string
		}
		var got []delta
		take := func(n int) {
			for len(got) < n {
				ev := e.next("a delta", func(ev Event) bool { return ev.Type == EventTextDelta })
				got = append(got, delta{ev.Seq, ev.Offset, ev.Text})
			}
		}
		take(2)
		v := e.view()
		if v.StreamSeq == 0 || v.Streaming != "Hello" || got[0] != (delta{v.StreamSeq, 0, "Hel"}) || got[1] != (delta{v.StreamSeq, 3, "lo"}) {
			t.Fatalf("view %d %q, deltas %+v", v.StreamSeq, v.Streaming, got)
		}
		close(release)
		take(4)
		if a, b := got[2], got[3]; a.seq <= got[0].seq || b.seq != a.seq || a.offset != 0 || b.offset != len(a.text) || a.text+b.text != "Done!" {
			t.Errorf("the second answer's deltas %+v after the first's %+v", got[2:], got[:2])
		}
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.StreamSeq != 0 || v.Streaming != "" {
			t.Errorf("after the turn: StreamSeq %d, streaming %q", v.StreamSeq, v.Streaming)
		}
	})
}
