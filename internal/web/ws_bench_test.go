package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
)

// benchServer is the web server on the embedded store with the fake agent and a fake clock,
// with one user, their conversation and a Bearer token for dialing.
type benchServer struct {
	ts    *httptest.Server
	conv  *fakeConversations
	clk   *clock.Fake
	token string
	id    string
}

func newBenchServer(b *testing.B) *benchServer {
	b.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "parley.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Now().UTC())
	fc := newFakeConversations()
	srv := New(Config{PasswordCost: bcrypt.MinCost, APIBurst: 1 << 20, APIPerMinute: 1 << 20},
		Deps{Store: st, Conversations: fc, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
	})
	u, err := st.CreateUser(ctx, store.User{Name: "ann", Role: store.RoleMember, PasswordHash: []byte("x")})
	if err != nil {
		b.Fatal(err)
	}
	token, _, err := auth.CreateToken(ctx, st, clk.Now(), u.ID, "bench")
	if err != nil {
		b.Fatal(err)
	}
	c, err := st.CreateConversation(ctx, store.Conversation{OwnerID: u.ID, Title: "bench", Status: store.StatusIdle})
	if err != nil {
		b.Fatal(err)
	}
	return &benchServer{ts: ts, conv: fc, clk: clk, token: token, id: c.ID}
}

func (s *benchServer) dial(b *testing.B) *websocket.Conn {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.ts.URL, "http")+"/conversations/"+s.id+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.token}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.CloseNow() })
	// Read the connect-time sync (status line and streaming area).
	for range 2 {
		if _, _, err := conn.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return conn
}

func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkSocketsHeldOpen opens 1,000 conversation sockets and holds them, reporting the
// memory (heap in use + goroutine stacks) per socket. Server and clients share the process, so
// the figure covers both ends of each connection: an upper bound of the server's share.
func BenchmarkSocketsHeldOpen(b *testing.B) {
	const n = 1000
	s := newBenchServer(b)
	for b.Loop() {
		before := heapAndStacks()
		goroutines := runtime.NumGoroutine()
		conns := make([]*websocket.Conn, 0, n)
		for range n {
			conns = append(conns, s.dial(b))
		}
		if got := s.conv.subscribers(s.id); got != n {
			b.Fatalf("%d subscribers, want %d", got, n)
		}
		after := heapAndStacks()
		b.ReportMetric(float64(after-before)/n, "bytes/socket")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/socket")
		for _, c := range conns {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}
}

// BenchmarkTextDeltaToFrame measures the time from the agent publishing a text delta to the
// page's end of the socket reading its frame, after a quiet spell (the leading-edge flush;
// deltas that follow within 50 ms wait for the coalescing window by design).
func BenchmarkTextDeltaToFrame(b *testing.B) {
	s := newBenchServer(b)
	conn := s.dial(b)
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		s.clk.Advance(deltaFlush) // a quiet spell on the server's clock
		start := time.Now()
		s.conv.publish(s.id, agent.Event{ConversationID: s.id, Type: agent.EventTextDelta, Text: "word "})
		if _, _, err := conn.Read(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
