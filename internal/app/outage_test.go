package app

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/store/pgtest"
)

// The outage tests run the real binary against a database that fails: a proxy that cuts one
// process off from PostgreSQL while the others keep theirs, and a private PostgreSQL that is
// restarted, crashed and frozen under load. What they pin: no request waits past the deadline,
// an outage is answered 503 unavailable with Retry-After (never 500), /readyz is ready only
// when the process takes writes, the process serves again by itself soon after the database
// returns, and nothing acknowledged is lost.

// freezeFor is how long TestDatabaseOutage freezes the database; docs/benchmarks.md quotes a run
// with -outage.freeze=40s.
var freezeFor = flag.Duration("outage.freeze", 12*time.Second, "how long TestDatabaseOutage freezes PostgreSQL")

// requestDeadline is the longest any request may take, whatever the database does (10 s, and a
// margin for a loaded test machine).
const requestDeadline = 12 * time.Second

// gatedModel is a Chat Completions server for any number of conversations: a conversation's
// first model call asks for the gated webhook, and once a tool result came back it answers.
type gatedModel struct{ n atomic.Int64 }

func (m *gatedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(raw, &req)
	w.Header().Set("Content-Type", "text/event-stream")
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "tool" {
		answer(finalAnswer)(w, r, raw)
		return
	}
	callTool(fmt.Sprintf("call_%d", m.n.Add(1)), gatedTool, `{"item":"printer"}`)(w, r, raw)
}

// outcome is one request's answer as an outage test records it.
type outcome struct {
	proc, what string
	status     int
	kind       string
	retryAfter string
	took       time.Duration
	err        error
	at         time.Time
}

func (o outcome) String() string {
	return fmt.Sprintf("%s %s: %d %s retry-after=%q in %v err=%v", o.proc, o.what, o.status, o.kind, o.retryAfter, o.took.Round(time.Millisecond), o.err)
}

// try sends one request with the given client and records what came back; it never fails the
// test by itself.
func try(c *http.Client, base, token, proc, method, path, body string) outcome {
	o := outcome{proc: proc, what: method + " " + path, at: time.Now()}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.Do(req)
	o.took = time.Since(o.at)
	if err != nil {
		o.err = err
		return o
	}
	defer res.Body.Close()
	o.status, o.retryAfter = res.StatusCode, res.Header.Get("Retry-After")
	var env struct {
		Error struct {
			Kind string `json:"kind"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &env)
	o.kind = env.Error.Kind
	return o
}

// withHost returns databaseURL with its host:port replaced.
func withHost(t *testing.T, databaseURL, hostport string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostport
	return u.String()
}

// setEnv returns env with key set to value.
func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// awaitingOn starts n conversations on r, each waiting for the gated call's approval, and
// returns their ids with their calls' ids.
func awaitingOn(t *testing.T, r *running, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for range n {
		conv := startTurn(t, r, "open a ticket for the printer")
		v := waitConv(t, r, conv, "awaiting approval", func(v convJSON) bool { return v.Status == "awaiting" && len(v.ToolCalls) == 1 })
		out[conv] = v.ToolCalls[0].ID
	}
	return out
}

// unavailableOrOK reports whether o is an honest answer during an outage: success, or 503
// unavailable with Retry-After (a 409 or 404 is a real answer too).
func honest(o outcome) bool {
	switch {
	case o.err != nil:
		return false
	case o.status == http.StatusServiceUnavailable:
		return o.kind == "unavailable" && o.retryAfter != ""
	default:
		return o.status < 500
	}
}

// TestCutOffProcessRecovers: two processes share a PostgreSQL database, b through a proxy; b
// runs live conversations waiting for approval. The proxy cuts b off (refused, then black-holed)
// for longer than the cluster's TTL, so b fences and a takes the conversations over; requests go
// to both all along. While cut off, b answers only 503 unavailable with Retry-After and /readyz
// says not ready; after the heal b serves again — reads, approvals, new messages — within a few
// seconds, by itself.
func TestCutOffProcessRecovers(t *testing.T) {
	t.Parallel() // mostly waiting out cuts: beside the other outage test
	hooks := newReceiver(false)
	hookSrv := testServer(t, hooks, nil)
	modelSrv := testServer(t, &gatedModel{}, nil)
	env := clusterEnv(t, modelSrv.URL, hookSrv.URL)
	databaseURL := env.lookup("DATABASE_URL")
	u, _ := url.Parse(databaseURL)
	proxy := pgtest.NewProxy(t, u.Host)

	a := env.serve(t)
	envB := *env
	envB.env = setEnv(env.env, "DATABASE_URL", withHost(t, databaseURL, proxy.Addr()))
	b := envB.serve(t)
	ra, rb := env.api(a), env.api(b)

	for _, mode := range []struct {
		name string
		mode pgtest.ProxyMode
	}{{"refused", pgtest.Refuse}, {"black-holed", pgtest.BlackHole}} {
		t.Run(mode.name, func(t *testing.T) {
			calls := awaitingOn(t, rb, 3) // b owns them: its actors are live at the cut
			client := &http.Client{Timeout: 30 * time.Second}

			proxy.Set(mode.mode)
			cutAt := time.Now()
			var mu sync.Mutex
			var bad []outcome
			record := func(o outcome) {
				if o.took > requestDeadline || !honest(o) {
					mu.Lock()
					bad = append(bad, o)
					mu.Unlock()
				}
			}
			// During the cut (4 s: b fences after TTL/2, a takes over after the TTL), requests go
			// to both processes.
			for time.Since(cutAt) < 4*time.Second {
				var wg sync.WaitGroup
				for conv := range calls {
					for _, p := range []struct {
						name string
						r    *running
					}{{"a", ra}, {"b", rb}} {
						wg.Go(func() { record(try(client, p.r.url, p.r.token, p.name, "GET", "/api/v1/conversations/"+conv, "")) })
					}
				}
				wg.Go(func() {
					o := try(client, rb.url, "", "b", "GET", "/readyz", "")
					if time.Since(cutAt) > 2*time.Second && o.status == http.StatusOK {
						mu.Lock()
						bad = append(bad, outcome{proc: "b", what: "GET /readyz said ready while cut off", status: o.status})
						mu.Unlock()
					}
				})
				wg.Wait()
				time.Sleep(100 * time.Millisecond)
			}
			proxy.Set(pgtest.Pass)
			healedAt := time.Now()

			// b serves again by itself: every conversation read, approved and written to through b.
			var back time.Duration
			for {
				ok := true
				for conv := range calls {
					o := try(client, rb.url, rb.token, "b", "GET", "/api/v1/conversations/"+conv, "")
					record(o)
					ok = ok && o.status == http.StatusOK
				}
				if r := try(client, rb.url, "", "b", "GET", "/readyz", ""); r.status != http.StatusOK {
					ok = false
				}
				if ok {
					back = time.Since(healedAt)
					break
				}
				if time.Since(healedAt) > 15*time.Second {
					t.Fatalf("b does not serve 15 s after the heal")
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%s: b served again %v after the heal", mode.name, back.Round(time.Millisecond))
			// Live again too: an event stream opened on b hears the approvals' results.
			streams := map[string]<-chan string{}
			for conv := range calls {
				ch, res := rb.entries(t, conv)
				t.Cleanup(func() { res.Body.Close() })
				streams[conv] = ch
			}
			for conv, call := range calls {
				o := try(client, rb.url, rb.token, "b", "POST", "/api/v1/conversations/"+conv+"/calls/"+call+"/resolve", `{"decision":"approve"}`)
				if o.status != http.StatusOK {
					t.Errorf("approve through b after the heal: %v", o)
				}
			}
			for conv := range calls {
				waitEntry(t, streams[conv], "tool_result")
				waitConv(t, rb, conv, "finished", finished)
				o := try(client, rb.url, rb.token, "b", "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"thanks"}`)
				if o.status != http.StatusAccepted {
					t.Errorf("message through b after the heal: %v", o)
				}
			}
			for _, o := range bad {
				t.Errorf("dishonest or slow answer: %v", o)
			}
		})
	}
	_, applied, badHooks := hooks.seen()
	if len(badHooks) != 0 {
		t.Errorf("webhook requests refused: %v", badHooks)
	}
	if len(applied) != 6 {
		t.Errorf("the gated webhook ran %d times for 6 approved calls: %v", len(applied), applied)
	}
}

// lookup returns the value of key in the environment of the runs.
func (e *killEnv) lookup(key string) string {
	v := ""
	for _, kv := range e.env {
		if val, ok := strings.CutPrefix(kv, key+"="); ok {
			v = val // the last one counts, as for exec
		}
	}
	return v
}

// textModel answers every Chat Completions request with a short text.
type textModel struct{}

func (textModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	answer("noted")(w, r, raw)
}

// load sends messages and reads to a process until stop closes, recording every answer and
// the texts it acknowledged (202) per conversation.
type load struct {
	r     *running
	convs []string

	mu    sync.Mutex
	all   []outcome
	acked map[string][]string
}

func (l *load) run(stop <-chan struct{}, workers int) *sync.WaitGroup {
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	var seq atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				conv := l.convs[(w+i)%len(l.convs)]
				var o outcome
				var text string
				if i%2 == 0 {
					text = fmt.Sprintf("message %d", seq.Add(1))
					body, _ := json.Marshal(map[string]string{"text": text})
					o = try(client, l.r.url, l.r.token, "p", "POST", "/api/v1/conversations/"+conv+"/messages", string(body))
				} else {
					o = try(client, l.r.url, l.r.token, "p", "GET", "/api/v1/conversations/"+conv, "")
				}
				l.mu.Lock()
				l.all = append(l.all, o)
				if text != "" && o.status == http.StatusAccepted {
					l.acked[conv] = append(l.acked[conv], text)
				}
				l.mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	return &wg
}

// TestDatabaseOutage: one process on a private PostgreSQL that is restarted, crashed (down a
// few seconds) and frozen (SIGSTOP) while requests are in flight. No request waits past the
// deadline; every failure is 503 unavailable with Retry-After; /readyz is not ready while the
// database is away; once /readyz is ready again a message is taken; every message that was
// acknowledged (202) is in its conversation at the end.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel() // mostly waiting out outages: beside the other outage test
	pg := pgtest.Private(t)
	modelSrv := testServer(t, textModel{}, nil)
	hookSrv := testServer(t, newReceiver(false), nil)
	env := newKillEnv(t, pg.URL(), modelSrv.URL, hookSrv.URL)
	env.env = append(env.env, "PARLEY_NODE_TTL=1500ms", "PARLEY_ORPHAN_SCAN=200ms",
		"PARLEY_MESSAGES_PER_MINUTE=60000", "PARLEY_MESSAGE_BURST=1000")
	p := env.serve(t)
	r := env.api(p)
	client := &http.Client{Timeout: 30 * time.Second}

	var convs []string
	for range 4 {
		status, body := r.call(t, "POST", "/api/v1/conversations", `{"title":"outage"}`)
		if status != 201 {
			t.Fatalf("create: %d %v", status, body)
		}
		convs = append(convs, body["id"].(string))
	}
	l := &load{r: r, convs: convs, acked: map[string][]string{}}

	for _, outage := range []struct {
		name string
		do   func()
	}{
		{"restart", pg.Restart},
		{"crash", func() { pg.Crash(3 * time.Second) }},
		{"freeze", func() { pg.Freeze(); time.Sleep(*freezeFor); pg.Thaw() }},
	} {
		t.Run(outage.name, func(t *testing.T) {
			stop := make(chan struct{})
			wg := l.run(stop, 6)
			time.Sleep(500 * time.Millisecond)
			var notReady atomic.Bool
			probing := make(chan struct{})
			go func() {
				defer close(probing)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if o := try(client, r.url, "", "p", "GET", "/readyz", ""); o.status == http.StatusServiceUnavailable {
						notReady.Store(true)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
			outage.do()
			back := time.Now()
			// Ready again, and then a message is taken at once.
			for {
				if o := try(client, r.url, "", "p", "GET", "/readyz", ""); o.status == http.StatusOK {
					break
				}
				if time.Since(back) > 20*time.Second {
					t.Fatalf("/readyz not ready 20 s after the database returned")
				}
				time.Sleep(50 * time.Millisecond)
			}
			ready := time.Since(back)
			o := try(client, r.url, r.token, "p", "POST", "/api/v1/conversations/"+convs[0]+"/messages", `{"text":"after the outage"}`)
			if o.status != http.StatusAccepted {
				t.Errorf("/readyz said ready, but a message was refused: %v", o)
			} else {
				l.mu.Lock()
				l.acked[convs[0]] = append(l.acked[convs[0]], "after the outage")
				l.mu.Unlock()
			}
			time.Sleep(time.Second)
			close(stop)
			wg.Wait()
			<-probing
			if !notReady.Load() && outage.name != "restart" {
				t.Errorf("/readyz never said not ready during the %s", outage.name)
			}
			l.mu.Lock()
			var slowest time.Duration
			refused, refusedAfter := 0, 0
			for _, o := range l.all {
				slowest = max(slowest, o.took)
				if o.status != http.StatusOK && o.status != http.StatusAccepted {
					refused++
					if o.at.After(back) {
						refusedAfter++
					}
				}
				if o.took > requestDeadline || !honest(o) {
					t.Errorf("dishonest or slow answer: %v", o)
				}
			}
			t.Logf("%s: %d requests, %d refused (%d sent after the database returned), slowest %v, ready %v after the database returned",
				outage.name, len(l.all), refused, refusedAfter, slowest.Round(time.Millisecond), ready.Round(time.Millisecond))
			l.all = nil
			l.mu.Unlock()
		})
	}

	// Nothing acknowledged was lost.
	for conv, texts := range l.acked {
		v := getConv(t, r, conv)
		have := map[string]bool{}
		for _, m := range v.Messages {
			if m.Role == "user" {
				have[m.Content] = true
			}
		}
		for _, text := range texts {
			if !have[text] {
				t.Errorf("conversation %s lost the acknowledged message %q", conv, text)
			}
		}
	}
}
