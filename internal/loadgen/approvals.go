package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ApprovalsConfig is issue 18's workload, the one the peer benchmarks (Eino, ADK-Go) serve: N
// conversations each awaiting a gated webhook call (phase 1), then approved by C concurrent
// clients over the JSON API (phase 2), the model an OpenAI-compatible streaming server over
// HTTP, the final answer observed on each conversation's event stream.
type ApprovalsConfig struct {
	AdminURL  string // PostgreSQL URL of a user that may create databases; each run has its own
	WebBinary string // the Parley binary (built with -tags pprof when PprofDir is set)
	N, C      int
	Pool      int // pool_max_conns of the server (0: pgxpool's default)
	FloorN    int // bare INSERT commits over one connection, before the server starts
	Timeout   time.Duration
	// PprofDir, when set, receives cpu.pprof (phase 2 only) and allocs-before/after.pprof from
	// the server (a binary built with -tags pprof).
	PprofDir string
	Log      io.Writer // progress lines; nil discards them
}

// Dist is a latency distribution in milliseconds (nearest-rank percentiles).
type Dist struct {
	Count         int
	P50, P95, P99 float64
	Mean, Max     float64
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	var sum time.Duration
	var hi time.Duration
	for _, d := range ds {
		sum += d
		hi = max(hi, d)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Dist{Count: len(ds), P50: ms(Pct(ds, 50)), P95: ms(Pct(ds, 95)), P99: ms(Pct(ds, 99)),
		Mean: ms(sum / time.Duration(len(ds))), Max: ms(hi)}
}

// Phase is what one phase measured. CPU figures are totals over the phase.
type Phase struct {
	Latency    Dist // phase 1: message → pending on the stream; phase 2: approve → final answer on the stream
	Ack        Dist // phase 2: the resolve request's own reply (the decision durable)
	Errors     int
	Wall       time.Duration
	ServerCPU  time.Duration // the Parley process, utime+stime from /proc
	SyscallsW  int64         // the Parley process's write system calls (syscw in /proc/PID/io)
	SyscallsR  int64         // and its read system calls (syscr)
	PgCPU      time.Duration // every process named postgres on the host, as the peers measure
	PgOwnCPU   time.Duration // only the backends connected to this run's database, from their schedstat (ns)
	Xacts      int64         // write transactions on the server during the phase (transaction IDs assigned; host-wide)
	TupWritten int64         // tup_inserted+tup_updated+tup_deleted of this run's database
	// LoadCPU is this process's CPU: the clients, the fake model and the webhook receiver.
	LoadCPU time.Duration
	// MachineBusy is the CPU time every core of the machine spent not idle during the phase
	// (/proc/stat: everything on the host), out of MachineCPU (the wall time times the cores).
	MachineBusy, MachineCPU time.Duration
	// Tables is the work per table in the phase (pg_stat_user_tables): scans and rows written.
	Tables map[string]TableStats
}

// TableStats is one table's counters over a phase.
type TableStats struct {
	SeqScan, IdxScan, Inserted, Updated, Deleted int64
}

// ApprovalsReport is one run.
type ApprovalsReport struct {
	N, C           int
	Phase1, Phase2 Phase
	Floor          Dist // bare single-row INSERT commit, one connection, before the server started
	ModelCalls     int64
	WebhookCalls   int
	WebhookBodies  int
	WebhookKeys    int
	FirstErrors    []string
	OK             bool
}

// Print writes the report in the peers' summary format ("#"-prefixed lines).
func (r ApprovalsReport) Print(w io.Writer) {
	per := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(max(1, n)) }
	rate := func(p Phase) float64 {
		if p.Wall <= 0 {
			return 0
		}
		return float64(p.Latency.Count) / p.Wall.Seconds()
	}
	p1, p2 := r.Phase1, r.Phase2
	fmt.Fprintf(w, "# Parley approvals: N=%d C=%d, ok=%v\n", r.N, r.C, r.OK)
	fmt.Fprintf(w, "#   phase 1 (message -> approval pending):  p50 %.2f  p95 %.2f  p99 %.2f ms, %.0f/s, errors %d\n",
		p1.Latency.P50, p1.Latency.P95, p1.Latency.P99, rate(p1), p1.Errors)
	fmt.Fprintf(w, "#   phase 2 (approve -> final \"sent\"):      p50 %.2f  p95 %.2f  p99 %.2f ms, %.0f/s, errors %d\n",
		p2.Latency.P50, p2.Latency.P95, p2.Latency.P99, rate(p2), p2.Errors)
	fmt.Fprintf(w, "#   phase 2 resolve acknowledgement (decision durable): p50 %.2f  p95 %.2f  p99 %.2f ms\n", p2.Ack.P50, p2.Ack.P95, p2.Ack.P99)
	fmt.Fprintf(w, "#   CPU per call: phase 1 server %.2f ms + postgres %.2f ms; phase 2 server %.2f ms + postgres %.2f ms\n",
		per(p1.ServerCPU, p1.Latency.Count), per(p1.PgCPU, p1.Latency.Count), per(p2.ServerCPU, p2.Latency.Count), per(p2.PgCPU, p2.Latency.Count))
	fmt.Fprintf(w, "#   postgres CPU of this database's backends only: phase 1 %.3f ms, phase 2 %.3f ms per call\n",
		per(p1.PgOwnCPU, p1.Latency.Count), per(p2.PgOwnCPU, p2.Latency.Count))
	fmt.Fprintf(w, "#   machine in phase 2: load generator (clients, fake model, webhook receiver) %.2f ms per approval; all cores %.0f%% busy, %.2f ms of CPU per approval on the host\n",
		per(p2.LoadCPU, p2.Latency.Count), 100*float64(p2.MachineBusy)/float64(max(1, p2.MachineCPU)), per(p2.MachineBusy, p2.Latency.Count))
	fmt.Fprintf(w, "#   server system calls per approval (phase 2): %.1f writes, %.1f reads\n",
		float64(p2.SyscallsW)/float64(max(1, p2.Latency.Count)), float64(p2.SyscallsR)/float64(max(1, p2.Latency.Count)))
	fmt.Fprintf(w, "#   database per approval (phase 2): %.2f write transactions (host-wide), %.2f rows written\n",
		float64(p2.Xacts)/float64(max(1, p2.Latency.Count)), float64(p2.TupWritten)/float64(max(1, p2.Latency.Count)))
	if n := float64(max(1, p2.Latency.Count)); len(p2.Tables) > 0 {
		names := make([]string, 0, len(p2.Tables))
		for name := range p2.Tables {
			names = append(names, name)
		}
		sort.Strings(names)
		fmt.Fprintf(w, "#   per approval, by table (seq scans, index scans, inserted, updated, deleted):")
		for _, name := range names {
			t := p2.Tables[name]
			fmt.Fprintf(w, " %s %.2f/%.2f/%.2f/%.2f/%.2f;", name, float64(t.SeqScan)/n, float64(t.IdxScan)/n, float64(t.Inserted)/n, float64(t.Updated)/n, float64(t.Deleted)/n)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "#   bare pgx INSERT commit (1 conn): p50 %.3f ms  p99 %.3f ms\n", r.Floor.P50, r.Floor.P99)
	fmt.Fprintf(w, "#   model calls %d, webhook calls %d (distinct bodies %d, idempotency keys %d)\n", r.ModelCalls, r.WebhookCalls, r.WebhookBodies, r.WebhookKeys)
	for _, e := range r.FirstErrors {
		fmt.Fprintln(w, "#   error:", e)
	}
}

// RunApprovals runs the workload once on a fresh database, which it drops at the end.
func RunApprovals(ctx context.Context, cfg ApprovalsConfig) (ApprovalsReport, error) {
	rep := ApprovalsReport{N: cfg.N, C: cfg.C}
	if cfg.N <= 0 || cfg.C <= 0 {
		return rep, errors.New("loadgen: N and C must be positive")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(logw, "approvals: "+format+"\n", args...) }
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	admin, err := pgx.Connect(ctx, cfg.AdminURL)
	if err != nil {
		return rep, fmt.Errorf("connect admin: %w", err)
	}
	defer admin.Close(context.Background())
	dbName := fmt.Sprintf("parley_approvals_%d_%d", time.Now().Unix(), os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbName); err != nil {
		return rep, fmt.Errorf("create database: %w", err)
	}
	defer func() {
		if _, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)"); err != nil {
			logf("drop database %s: %v", dbName, err)
		}
	}()
	dbURL, err := withDatabase(cfg.AdminURL, dbName, cfg.Pool)
	if err != nil {
		return rep, err
	}
	if cfg.FloorN > 0 {
		if rep.Floor, err = floorOneConn(ctx, dbURL, cfg.FloorN); err != nil {
			return rep, fmt.Errorf("floor: %w", err)
		}
	}

	model, err := StartModelServer()
	if err != nil {
		return rep, err
	}
	defer model.Close()
	hook, err := StartReceiver()
	if err != nil {
		return rep, err
	}
	defer hook.Close()

	srv, err := startParley(ctx, cfg, dbURL, model.BaseURL(), hook.URL(), logf)
	if err != nil {
		return rep, err
	}
	defer srv.stop()
	c := &client{cfg: Config{BaseURL: srv.url, Token: srv.token}, http: &http.Client{Transport: &http.Transport{
		Proxy: nil, MaxIdleConnsPerHost: cfg.N + 2*cfg.C + 8, IdleConnTimeout: 90 * time.Second,
	}}}
	defer c.http.CloseIdleConnections()

	var mu sync.Mutex
	fail := func(p *Phase, err error) {
		mu.Lock()
		defer mu.Unlock()
		p.Errors++
		if len(rep.FirstErrors) < 5 {
			rep.FirstErrors = append(rep.FirstErrors, err.Error())
		}
	}
	statsConn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return rep, fmt.Errorf("connect %s: %w", dbName, err)
	}
	defer statsConn.Close(context.Background())
	measure := func(p *Phase, run func()) {
		tables0 := tableStats(ctx, statsConn)
		own0 := backendsCPU(ctx, admin, dbName)
		x0 := xid(ctx, admin)
		_, t0 := dbCounters(ctx, admin, dbName)
		r0, w0 := procSyscalls(srv.pid)
		s0, pg0 := procCPU(srv.pid), postgresCPU()
		l0 := procCPU(os.Getpid())
		busy0, _ := machineBusy()
		start := time.Now()
		run()
		p.Wall = time.Since(start)
		p.ServerCPU, p.PgCPU = procCPU(srv.pid)-s0, postgresCPU()-pg0
		busy1, cores := machineBusy()
		p.LoadCPU, p.MachineBusy = procCPU(os.Getpid())-l0, busy1-busy0
		p.MachineCPU = p.Wall * time.Duration(cores)
		r1, w1 := procSyscalls(srv.pid)
		p.SyscallsR, p.SyscallsW = r1-r0, w1-w0
		p.PgOwnCPU = cpuSince(own0, backendsCPU(ctx, admin, dbName))
		// Backends report their row counters when they go idle, at most once a second: wait
		// for them. Write transactions are counted exactly, by transaction IDs.
		time.Sleep(1500 * time.Millisecond)
		_, t1 := dbCounters(ctx, admin, dbName)
		p.Xacts, p.TupWritten = xid(ctx, admin)-x0-1, t1-t0
		p.Tables = map[string]TableStats{}
		for name, t := range tableStats(ctx, statsConn) {
			b := tables0[name]
			d := TableStats{t.SeqScan - b.SeqScan, t.IdxScan - b.IdxScan, t.Inserted - b.Inserted, t.Updated - b.Updated, t.Deleted - b.Deleted}
			if d != (TableStats{}) {
				p.Tables[name] = d
			}
		}
	}

	// Phase 1: each conversation is created, its stream opened and the message sent; it is
	// counted when the call is pending on its stream.
	convs := make([]*approvalConv, cfg.N)
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	var p1 []time.Duration
	logf("phase 1: %d conversations, %d clients", cfg.N, cfg.C)
	measure(&rep.Phase1, func() {
		parallel(cfg.N, cfg.C, func(i int) {
			cv, d, err := c.awaitingConversation(ctx, streamCtx, i)
			if err != nil {
				fail(&rep.Phase1, fmt.Errorf("conversation %d: %w", i, err))
				return
			}
			mu.Lock()
			convs[i] = cv
			p1 = append(p1, d)
			mu.Unlock()
		})
	})
	rep.Phase1.Latency = dist(p1)

	if cfg.PprofDir != "" {
		if err := srv.pprof(ctx, "/debug/pprof/allocs", filepath.Join(cfg.PprofDir, "allocs-before.pprof")); err != nil {
			return rep, err
		}
		if err := srv.pprof(ctx, "/debug/cpu/start?path="+url.QueryEscape(filepath.Join(cfg.PprofDir, "cpu.pprof")), ""); err != nil {
			return rep, err
		}
	}

	// Phase 2: C clients approve; each approval is timed from the request to the final answer
	// (the assistant message after the tool's result) on the conversation's stream.
	var p2, acks []time.Duration
	logf("phase 2: approving with %d clients", cfg.C)
	measure(&rep.Phase2, func() {
		parallel(cfg.N, cfg.C, func(i int) {
			cv := convs[i]
			if cv == nil {
				return
			}
			d, ack, err := c.approve(ctx, cv)
			if err != nil {
				fail(&rep.Phase2, fmt.Errorf("approve %d: %w", i, err))
				return
			}
			mu.Lock()
			p2 = append(p2, d)
			acks = append(acks, ack)
			mu.Unlock()
		})
	})
	rep.Phase2.Latency, rep.Phase2.Ack = dist(p2), dist(acks)
	if cfg.PprofDir != "" {
		if err := srv.pprof(ctx, "/debug/cpu/stop", ""); err != nil {
			return rep, err
		}
		if err := srv.pprof(ctx, "/debug/pprof/allocs", filepath.Join(cfg.PprofDir, "allocs-after.pprof")); err != nil {
			return rep, err
		}
	}
	stopStreams()

	rep.ModelCalls = model.Calls()
	rep.WebhookCalls, rep.WebhookBodies, rep.WebhookKeys = hook.Counts()
	rep.OK = rep.Phase1.Errors == 0 && rep.Phase2.Errors == 0 && rep.WebhookCalls == cfg.N &&
		rep.WebhookBodies == cfg.N && rep.WebhookKeys == cfg.N
	return rep, nil
}

// approvalConv is one conversation awaiting its call, with its event stream.
type approvalConv struct {
	id, callID string
	lastSeq    int64 // the highest log entry seen on the stream when the call was pending
	events     <-chan approvalEvent
}

// approvalEvent is an event of the stream: its name and the fields the workload reads.
type approvalEvent struct {
	name       string
	Type       string          `json:"type"`
	Seq        int64           `json:"seq"`
	ToolCallID string          `json:"tool_call_id"`
	Status     string          `json:"status"`
	Text       string          `json:"text"`
	Data       json.RawMessage `json:"data"`
}

// awaitingConversation creates conversation i, opens its stream, sends "email bob: hello i"
// and waits until the deliver_email call is pending; the duration is from the message to then.
func (c *client) awaitingConversation(ctx, streamCtx context.Context, i int) (*approvalConv, time.Duration, error) {
	var created struct {
		ID string `json:"id"`
	}
	if err := c.do(ctx, "POST", "/api/v1/conversations", map[string]any{"title": fmt.Sprintf("approvals %d", i)}, http.StatusCreated, &created); err != nil {
		return nil, 0, fmt.Errorf("create: %w", err)
	}
	events, err := c.rawStream(streamCtx, created.ID)
	if err != nil {
		return nil, 0, err
	}
	cv := &approvalConv{id: created.ID, events: events}
	t0 := time.Now()
	if err := c.do(ctx, "POST", "/api/v1/conversations/"+created.ID+"/messages", map[string]any{"text": fmt.Sprintf("email bob: hello %d", i)}, http.StatusAccepted, nil); err != nil {
		return nil, 0, fmt.Errorf("send: %w", err)
	}
	for {
		ev, err := next(ctx, events)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case ev.name == "entry":
			cv.lastSeq = max(cv.lastSeq, ev.Seq)
		case ev.name == "turn_error":
			return nil, 0, fmt.Errorf("turn error: %s", ev.Text)
		case ev.name == "tool_call" && ev.Status == "awaiting":
			cv.callID = ev.ToolCallID
			// The pending call's entries are logged before the event; the final answer is
			// the first assistant message after them.
			return cv, time.Since(t0), nil
		}
	}
}

// approve resolves the conversation's call and waits for the final answer on its stream. It
// returns approve → final answer and the resolve request's own latency.
func (c *client) approve(ctx context.Context, cv *approvalConv) (total, ack time.Duration, err error) {
	t0 := time.Now()
	if err := c.do(ctx, "POST", "/api/v1/conversations/"+cv.id+"/calls/"+cv.callID+"/resolve", map[string]any{"decision": "approve"}, http.StatusOK, nil); err != nil {
		return 0, 0, err
	}
	ack = time.Since(t0)
	for {
		ev, err := next(ctx, cv.events)
		if err != nil {
			return 0, 0, err
		}
		switch {
		case ev.name == "turn_error":
			return 0, 0, fmt.Errorf("turn error: %s", ev.Text)
		case ev.name == "entry" && ev.Type == "assistant_message" && ev.Seq > cv.lastSeq:
			var d struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			if d.Text != "sent" {
				return 0, 0, fmt.Errorf("final answer %q, want \"sent\"", d.Text)
			}
			return time.Since(t0), ack, nil
		}
	}
}

func next(ctx context.Context, events <-chan approvalEvent) (approvalEvent, error) {
	select {
	case <-ctx.Done():
		return approvalEvent{}, ctx.Err()
	case ev, ok := <-events:
		if !ok {
			return approvalEvent{}, errors.New("the event stream ended")
		}
		if ev.name == "resync" || ev.name == "shutdown" {
			return ev, fmt.Errorf("the stream sent %s", ev.name)
		}
		return ev, nil
	}
}

// rawStream opens a conversation's event stream and delivers every event with a data line
// except text deltas and progress (sseEvents).
func (c *client) rawStream(ctx context.Context, id string) (<-chan approvalEvent, error) {
	return sseEvents(ctx, c, id, func(name string, data []byte) (approvalEvent, bool) {
		if name == "text_delta" || name == "progress" {
			return approvalEvent{}, false
		}
		var ev approvalEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return approvalEvent{}, false
		}
		ev.name = name
		return ev, true
	})
}

// parallel runs f(i) for i in [0,n) on c workers and returns when all are done.
func parallel(n, c int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// withDatabase replaces the database of a PostgreSQL URL and sets pool_max_conns when pool > 0.
func withDatabase(admin, name string, pool int) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("admin URL: %w", err)
	}
	u.Path = "/" + name
	if pool > 0 {
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(pool))
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// floorOneConn measures n bare single-row INSERT commits over one connection (the peers' floor).
func floorOneConn(ctx context.Context, dbURL string, n int) (Dist, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return Dist{}, err
	}
	q := u.Query()
	q.Del("pool_max_conns")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return Dist{}, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE floor_probe (id bigserial PRIMARY KEY, session_id text, body text, created_at timestamptz DEFAULT now())`); err != nil {
		return Dist{}, err
	}
	ds := make([]time.Duration, 0, n)
	for i := range n + 20 {
		t := time.Now()
		if _, err := conn.Exec(ctx, `INSERT INTO floor_probe(session_id, body) VALUES ($1,$2)`, "s", fmt.Sprintf("hello %d", i)); err != nil {
			return Dist{}, err
		}
		if i >= 20 { // the first 20 warm up
			ds = append(ds, time.Since(t))
		}
	}
	return dist(ds), nil
}

// tableStats reads the counters of the database's tables.
func tableStats(ctx context.Context, conn *pgx.Conn) map[string]TableStats {
	out := map[string]TableStats{}
	rows, err := conn.Query(ctx, `SELECT relname, coalesce(seq_scan, 0), coalesce(idx_scan, 0), n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var t TableStats
		if rows.Scan(&name, &t.SeqScan, &t.IdxScan, &t.Inserted, &t.Updated, &t.Deleted) == nil {
			out[name] = t
		}
	}
	return out
}

// xid is the server's next transaction ID (reading it assigns one).
func xid(ctx context.Context, admin *pgx.Conn) int64 {
	var x int64
	_ = admin.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&x)
	return x
}

// dbCounters reads the database's transactions and written rows from pg_stat_database.
func dbCounters(ctx context.Context, admin *pgx.Conn, db string) (xacts, tups int64) {
	_ = admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted
		FROM pg_stat_database WHERE datname = $1`, db).Scan(&xacts, &tups)
	return xacts, tups
}

// backendsCPU reads the CPU so far of each client backend connected to db (by PID). An
// autovacuum worker is left out: one that happened to be on the database at the end and not at
// the start was counted with its whole life.
func backendsCPU(ctx context.Context, admin *pgx.Conn, db string) map[int]time.Duration {
	out := map[int]time.Duration{}
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db)
	if err != nil {
		return out
	}
	pids, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
	for _, pid := range pids {
		out[int(pid)] = backendCPU(int(pid))
	}
	return out
}

// backendCPU is a backend's CPU time so far, 0 if gone: the scheduler's count in nanoseconds
// (/proc/PID/schedstat, which counts one thread: a backend has no other) where the kernel keeps
// one, else procCPU. Clock ticks lose up to 10 ms per backend and read: at N = 200 and a dozen
// backends, more than the difference between two builds.
func backendCPU(pid int) time.Duration {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	return procCPU(pid)
}

// cpuSince is the CPU the backends of now used since before (a backend that ended in between is
// not counted: a lower bound; the server's pool keeps its connections through a run).
func cpuSince(before, now map[int]time.Duration) time.Duration {
	var sum time.Duration
	for pid, t := range now {
		sum += t - before[pid]
	}
	return sum
}

// machineBusy is the CPU time all cores spent not idle since boot and how many cores there are
// (/proc/stat's cpu line: user, nice, system, irq and softirq, in clock ticks of 10 ms — not
// idle, iowait or steal, the time the hypervisor gave to other machines; guest time is already
// in user; the cores are its cpuN lines, every core of the host whatever this process's
// affinity).
func machineBusy() (time.Duration, int) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	lines := strings.Split(string(b), "\n")
	f := strings.Fields(lines[0])
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, _ := strconv.ParseUint(f[i], 10, 64)
		busy += n
	}
	cores := 0
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "cpu") {
			cores++
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond, cores
}

// procCPU is a process's utime+stime from /proc/PID/stat (clock ticks of 10 ms), 0 if gone.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// procSyscalls reads a process's read and write system calls so far from /proc/PID/io.
func procSyscalls(pid int) (reads, writes int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// postgresCPU sums the CPU of every process named postgres on the host, as the peers do (it
// includes other databases' work on the same server).
func postgresCPU() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		sum += procCPU(pid)
	}
	return sum
}

// parley is the server under test, started from cfg.WebBinary.
type parley struct {
	cmd       *exec.Cmd
	pid       int
	url       string
	token     string
	pprofAddr string
	done      chan struct{}
	dir       string
}

// startParley migrates the database, adds a user and a token, writes the tools file (a gated
// deliver_email webhook) and starts `web serve` on a loopback port.
func startParley(ctx context.Context, cfg ApprovalsConfig, dbURL, modelURL, hookURL string, logf func(string, ...any)) (*parley, error) {
	dir, err := os.MkdirTemp("", "parley-approvals-")
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			_ = os.RemoveAll(dir) // stop removes it once the server runs
		}
	}()
	tools := map[string]any{"tools": []any{map[string]any{
		"name": "deliver_email", "type": "webhook", "description": "Send an email.",
		"parameters": map[string]any{
			"type": "object", "required": []string{"to", "body"}, "additionalProperties": false,
			"properties": map[string]any{"to": map[string]any{"type": "string"}, "body": map[string]any{"type": "string"}},
		},
		"url": hookURL, "secret_env": "LOAD_WEBHOOK_SECRET", "allow_private_network": true,
		"approval": "requires_approval", "timeout_secs": 30,
	}}}
	tb, _ := json.Marshal(tools)
	toolsPath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(toolsPath, tb, 0o600); err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"PARLEY_ADDR=127.0.0.1:0",
		// development: production refuses a plain-HTTP webhook, and the receiver is on loopback.
		"PARLEY_ENV=development",
		"PARLEY_DATA_DIR="+dir,
		"PARLEY_MODEL=openai:load",
		"OPENAI_API_KEY=load-test-key",
		"OPENAI_BASE_URL="+modelURL,
		"PARLEY_TOOLS="+toolsPath,
		"LOAD_WEBHOOK_SECRET=load-test-webhook-secret-0123456789",
		"PARLEY_MESSAGES_PER_MINUTE=1000000", "PARLEY_MESSAGE_BURST=100000",
		"PARLEY_API_PER_MINUTE=10000000", "PARLEY_API_BURST=1000000",
		fmt.Sprintf("PARLEY_MAX_CONNS_PER_USER=%d", cfg.N+64),
		"PARLEY_PPROF_ADDR=",
	)
	if cfg.PprofDir != "" {
		env = append(env, "PARLEY_PPROF_ADDR=127.0.0.1:0")
	}
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, cfg.WebBinary, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("web %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(errb.Bytes()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	if _, err := run("", "migrate"); err != nil {
		return nil, err
	}
	if _, err := run("load test password\n", "user", "add", "--name", "load", "--role", "member", "--password-stdin"); err != nil {
		return nil, err
	}
	token, err := run("", "token", "create", "--user", "load", "--label", "approvals")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.WebBinary, "serve")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start web serve: %w", err)
	}
	started = true
	p := &parley{cmd: cmd, pid: cmd.Process.Pid, token: token, done: make(chan struct{}), dir: dir}
	addrs := make(chan string, 4)
	scan := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "parley listening on "); ok {
				addrs <- "url " + v
			} else if v, ok := strings.CutPrefix(line, "pprof listening on "); ok {
				addrs <- "pprof " + v
			} else if strings.Contains(line, "ERROR") {
				logf("server: %s", line)
			}
		}
	}
	go scan(stdout)
	go scan(stderr)
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.After(60 * time.Second)
	for p.url == "" || (cfg.PprofDir != "" && p.pprofAddr == "") {
		select {
		case a := <-addrs:
			kind, v, _ := strings.Cut(a, " ")
			if kind == "url" {
				p.url = v
			} else {
				p.pprofAddr = v
			}
		case <-p.done:
			_ = os.RemoveAll(dir)
			return nil, errors.New("web serve exited before listening")
		case <-deadline:
			p.stop()
			return nil, errors.New("web serve did not listen within 60 s")
		}
	}
	logf("server %s (pid %d)", p.url, p.pid)
	return p, nil
}

// pprof GETs a path of the server's profiling listener, saving the body to file when set.
func (p *parley) pprof(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+p.pprofAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("pprof %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof %s: status %d: %s", path, resp.StatusCode, body)
	}
	if file != "" {
		return os.WriteFile(file, body, 0o600)
	}
	return nil
}

// stop ends the server (SIGTERM, then SIGKILL after 15 s) and removes its directory.
func (p *parley) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = os.RemoveAll(p.dir)
}
