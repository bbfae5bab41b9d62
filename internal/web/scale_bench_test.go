package web

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
)

// BenchmarkScaleSockets (issue 18, "Scale in one process"): the resident memory of a server
// process holding 10,000 open conversation sockets. The page ends live in another process (this
// test binary run again as BenchmarkScaleSocketClients), so the figure is the server's alone:
// VmRSS from /proc/self/status after a GC that returns freed memory to the system, before the
// sockets and with them open. PARLEY_SCALE_N overrides the count.
func BenchmarkScaleSockets(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("PARLEY_SCALE_N")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "parley.db"))
	if err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(time.Now().UTC())
	m := agent.New(agent.Config{Store: st, Provider: &pacedModel{started: make(chan struct{}), deltas: make(chan string)}, Tools: reg, Clock: clk, Logger: discardLogger()})
	if err := m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	srv := New(Config{PasswordCost: bcrypt.MinCost, APIBurst: 1 << 20, APIPerMinute: 1 << 20, PageBurst: 1 << 20, PagesPerMinute: 1 << 20, MaxConnsPerUser: 2 * n, MaxConns: 2 * n},
		Deps{Store: st, Agent: m, Clock: clk, Logger: discardLogger()})
	ts := httptest.NewServer(srv.Handler())
	defer func() {
		srv.Shutdown()
		ts.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.Close(cctx)
		_ = st.Close()
	}()
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
	for b.Loop() {
		before := rss(b)
		goroutines := runtime.NumGoroutine()
		open := SocketsOpen.Load()
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkScaleSocketClients$", "-test.benchtime=1x")
		cmd.Env = append(os.Environ(), "PARLEY_SOCKET_CLIENTS="+strings.Join([]string{ts.URL, token, c.ID, strconv.Itoa(n)}, "|"))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		ready := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "ready" {
					ready <- nil
					return
				}
				fmt.Fprintln(os.Stderr, "clients:", sc.Text())
			}
			ready <- fmt.Errorf("the clients ended before they were ready: %v", sc.Err())
		}()
		select {
		case err := <-ready:
			if err != nil {
				b.Fatal(err)
			}
		case <-time.After(5 * time.Minute):
			_ = cmd.Process.Kill()
			b.Fatal("the clients were not ready within 5 minutes")
		}
		if got := SocketsOpen.Load() - open; got != int64(n) {
			b.Fatalf("%d sockets open, want %d", got, n)
		}
		after := rss(b)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/1e6, "MB-heap-inuse")
		b.ReportMetric(float64(ms.StackInuse)/1e6, "MB-stacks")
		if path := os.Getenv("PARLEY_SCALE_HEAPPROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.WriteHeapProfile(f); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		if path := os.Getenv("PARLEY_SCALE_GOROUTINEPROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		// The stack a new goroutine starts with (the runtime's average of the stacks it scanned),
		// and how much of the goroutines' stacks is in use (scanned by the last GC), against
		// StackInuse, which counts each stack's whole allocation.
		sm := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}, {Name: "/gc/scan/stack:bytes"}}
		metrics.Read(sm)
		b.ReportMetric(float64(sm[0].Value.Uint64()), "B-stack-start")
		b.ReportMetric(float64(sm[1].Value.Uint64())/1e6, "MB-stacks-used")
		b.ReportMetric(after/1e6, "MB-RSS")
		b.ReportMetric((after-before)/1e6, "MB-RSS-growth")
		b.ReportMetric((after-before)/float64(n)/1e3, "KB/socket")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(n), "goroutines/socket")
		_ = stdin.Close() // the clients close their sockets and exit
		if err := cmd.Wait(); err != nil {
			b.Fatalf("clients: %v", err)
		}
		deadline := time.Now().Add(time.Minute)
		for SocketsOpen.Load() != open && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// rss is this process's resident set after collections and one that returns freed memory to the system.
func rss(b *testing.B) float64 {
	b.Helper()
	// Several cycles: each may halve a goroutine stack that uses under a quarter of it, as the
	// collections of a process that runs for a while do.
	for range 4 {
		runtime.GC()
	}
	debug.FreeOSMemory()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1e3
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkScaleSocketClients is the page ends of BenchmarkScaleSockets, run by it in a process
// of their own (PARLEY_SOCKET_CLIENTS = url|token|conversation|count); it skips otherwise. It
// opens the sockets, reads each one's connect-time frames, says "ready", and holds them until its
// stdin closes.
func BenchmarkScaleSocketClients(b *testing.B) {
	spec := os.Getenv("PARLEY_SOCKET_CLIENTS")
	if spec == "" {
		b.Skip("run by BenchmarkScaleSockets")
	}
	parts := strings.Split(spec, "|")
	n, _ := strconv.Atoi(parts[3])
	url := "ws" + strings.TrimPrefix(parts[0], "http") + "/conversations/" + parts[2] + "/ws"
	hdr := http.Header{"Authorization": {"Bearer " + parts[1]}}
	conns := make([]*websocket.Conn, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
				if err == nil {
					for range 2 {
						if _, _, err = conn.Read(ctx); err != nil {
							break
						}
					}
				}
				cancel()
				if err != nil {
					errs <- fmt.Errorf("socket %d: %w", i, err)
					continue
				}
				conns[i] = conn
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Keep reading so pings are answered while the server measures.
	for _, c := range conns {
		c.CloseRead(context.Background())
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range conns {
		_ = c.CloseNow()
	}
}
