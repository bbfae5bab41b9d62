package web

import (
	"context"
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
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
)

// pacedModel is a model that streams one text delta each time the benchmark hands it one, and
// ends its answer when deltas is closed: the agent's real path from a model's delta to the
// page's frame, one delta at a time (llmtest's steps stream all their deltas at once).
type pacedModel struct {
	started chan struct{}
	deltas  chan string
}

func (p *pacedModel) Name() string       { return "paced" }
func (p *pacedModel) ToolFormat() string { return "openai" }

func (p *pacedModel) Stream(ctx context.Context, _ llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	close(p.started)
	var text strings.Builder
	for {
		select {
		case d, ok := <-p.deltas:
			if !ok {
				return llm.Response{Text: text.String(), StopReason: "end_turn"}, nil
			}
			text.WriteString(d)
			if err := emit(llm.Event{Type: llm.EventTextDelta, Text: d}); err != nil {
				return llm.Response{}, err
			}
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
}

// benchServer is the web server on the embedded store with the real agent (its model paced by
// the benchmark) and a fake clock, with one user, their conversation and a Bearer token for
// dialing.
type benchServer struct {
	ts    *httptest.Server
	m     *agent.Manager
	model *pacedModel
	clk   *clock.Fake
	user  store.User
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
	clk := clock.NewFake(time.Now().UTC())
	model := &pacedModel{started: make(chan struct{}), deltas: make(chan string)}
	reg, err := tools.NewRegistry()
	if err != nil {
		b.Fatal(err)
	}
	m := agent.New(agent.Config{Store: st, Provider: model, Tools: reg, Clock: clock.NewFake(t0), Logger: discardLogger()})
	if err := m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	srv := New(Config{PasswordCost: bcrypt.MinCost, APIBurst: 1 << 20, APIPerMinute: 1 << 20},
		Deps{Store: st, Agent: m, Clock: clk, Logger: discardLogger()})
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(cctx); err != nil {
			b.Errorf("close the agent: %v", err)
		}
		_ = st.Close()
	})
	u, err := st.CreateUser(ctx, store.User{Name: "ann", Role: store.RoleMember, PasswordHash: []byte("x")})
	if err != nil {
		b.Fatal(err)
	}
	token, _, err := auth.CreateToken(ctx, st, clk.Now(), auth.TokenSpec{UserID: u.ID, Label: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	c, err := m.Create(ctx, as(u), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return &benchServer{ts: ts, m: m, model: model, clk: clk, user: u, token: token, id: c.ID}
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
		open := SocketsOpen.Load()
		conns := make([]*websocket.Conn, 0, n)
		for range n {
			conns = append(conns, s.dial(b))
		}
		// Each socket read its first frames after subscribing to the agent's events.
		if got := SocketsOpen.Load() - open; got != n {
			b.Fatalf("%d sockets open, want %d", got, n)
		}
		after := heapAndStacks()
		b.ReportMetric(float64(after-before)/n, "bytes/socket")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/socket")
		for _, c := range conns {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}
}

// BenchmarkTextDeltaToFrame measures the time from the model emitting a text delta to the
// page's end of the socket reading its frame, through the agent, after a quiet spell (the
// leading-edge flush; deltas that follow within 50 ms wait for the coalescing window by
// design).
func BenchmarkTextDeltaToFrame(b *testing.B) {
	s := newBenchServer(b)
	conn := s.dial(b)
	ctx := context.Background()
	if err := s.m.Send(ctx, s.id, as(s.user), "talk"); err != nil {
		b.Fatal(err)
	}
	<-s.model.started
	// The page shows the message and the new status before the first delta.
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if strings.Contains(string(data), `data-status=\"generating\"`) {
			break
		}
	}
	var lat []time.Duration
	for b.Loop() {
		s.clk.Advance(deltaFlush) // a quiet spell on the server's clock
		start := time.Now()
		s.model.deltas <- "word "
		if _, _, err := conn.Read(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	close(s.model.deltas)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
