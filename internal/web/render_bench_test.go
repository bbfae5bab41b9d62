package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/a-h/templ"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views"
)

// fiftyMessageView is a conversation of 50 messages (25 questions, 25 Markdown answers with a
// list, code and a link) and 10 finished tool calls, as a long but ordinary chat.
func fiftyMessageView() agent.View {
	v := agent.View{ID: "c1", OwnerID: "u1", Title: "A long chat", Status: store.StatusIdle}
	at := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	for i := 0; i < 50; i++ {
		m := agent.Message{Seq: int64(i*2 + 1), Role: "user", At: at, Content: fmt.Sprintf("Question %d: what about the <b>lunch</b> plans for next week?", i)}
		if i%2 == 1 {
			m.Role = "assistant"
			m.Content = fmt.Sprintf("Here is answer **%d**:\n\n- first, check the [calendar](https://example.com/cal)\n- then `send_email` to bob\n\n```go\nfmt.Println(%d)\n```\n\nThat is all.", i, i)
		}
		v.Messages = append(v.Messages, m)
	}
	for i := 0; i < 10; i++ {
		v.Calls = append(v.Calls, agent.CallView{Seq: int64(i*10 + 2), ID: fmt.Sprintf("call_%d", i), Name: "get_current_time", Executor: tools.Server,
			Status: store.CallResolved, Args: json.RawMessage(`{"format":"iso8601"}`), Result: json.RawMessage(`{"ok":true,"result":{"time":"2026-11-22T09:00:00Z"}}`)})
	}
	return v
}

// BenchmarkRenderConversationPage50 renders the whole conversation page (layout included) as
// GET /conversations/{id} does, with the assistant's Markdown already in the render cache (a
// page seen before, or the socket's re-render).
func BenchmarkRenderConversationPage50(b *testing.B) { benchmarkRenderPage(b, false) }

// BenchmarkRenderConversationPage50Cold is the same page with every message new to the cache.
func BenchmarkRenderConversationPage50Cold(b *testing.B) { benchmarkRenderPage(b, true) }

func benchmarkRenderPage(b *testing.B, cold bool) {
	v := fiftyMessageView()
	d := views.ConversationPage{Page: views.Page{ConversationID: v.ID, CSRF: "token", OwnerID: "u1",
		Viewer: views.Viewer{Principal: agent.Principal{UserID: "u1", Role: store.RoleMember, Via: "session"}, Name: "ann"}, Demo: true}, View: v}
	ld := views.LayoutData{Title: v.Title, User: &views.LayoutUser{Name: "ann", Role: "member"}, CSRF: "token", Script: "/static/x/js/hooks.js"}
	page := templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		return views.Layout(ld).Render(templ.WithChildren(ctx, views.ConversationBody(d)), w)
	})
	var buf bytes.Buffer
	b.ReportAllocs()
	d.View.Messages = append([]agent.Message(nil), v.Messages...)
	n := 0
	for b.Loop() {
		if cold {
			n++
			for i := range d.View.Messages {
				d.View.Messages[i].Content = fmt.Sprintf("%s %d", v.Messages[i].Content, n)
			}
		}
		buf.Reset()
		if err := page.Render(context.Background(), &buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "html-bytes")
}
