// Package loadgen drives a running Parley server through its public JSON API and event streams,
// the way a webhook or a job would: N conversations at once, each following its own event
// stream (Server-Sent Events) and running two turns, one with a gated call that the generator
// approves and one with a question form that it answers. It measures throughput, resolve
// acknowledgement latency, end-to-end turn latency, the server's RSS (from /metrics) and
// errors; optionally, in the same run, the floor: bare single-row INSERT commits on the
// server's database (see Floor).
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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Config says what to drive and how hard.
type Config struct {
	BaseURL       string
	Token         string
	Conversations int
	// Timeout bounds the whole run (default 5m).
	Timeout time.Duration
	// Client is the HTTP client; nil builds one with a connection per conversation and stream.
	Client *http.Client
	// Floor, when set, runs alongside the conversations (same run, same load) and its samples
	// go into Report.Floor. It returns when ctx ends.
	Floor func(ctx context.Context) ([]time.Duration, error)
	// FloorBurst, when set, runs before the conversations start, with their number as the
	// concurrency; its samples go into Report.FloorBurst.
	FloorBurst func(ctx context.Context, concurrency int) ([]time.Duration, error)
}

// Report is what a run measured.
type Report struct {
	Conversations int
	Turns         int
	Errors        int
	FirstErrors   []string
	Elapsed       time.Duration
	Resolve       []time.Duration // acknowledgement latency of each resolve (request → 200)
	Turn          []time.Duration // message sent → conversation idle again, resolve included
	Floor         []time.Duration // bare INSERT commits measured during the run (paced), if asked
	FloorBurst    []time.Duration // bare INSERT commits at the conversations' concurrency, before the load
	ServerRSS     float64         // bytes, process_resident_memory_bytes after the run
	ServerPeakRSS float64         // bytes, the highest RSS sampled during the run
}

// Print writes the report as plain lines.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "conversations %d, turns %d, errors %d, elapsed %s\n", r.Conversations, r.Turns, r.Errors, r.Elapsed.Round(time.Millisecond))
	if r.Elapsed > 0 {
		fmt.Fprintf(w, "throughput %.1f turns/s\n", float64(r.Turns)/r.Elapsed.Seconds())
	}
	fmt.Fprintf(w, "resolve latency p50 %s p99 %s (n=%d)\n", Pct(r.Resolve, 50), Pct(r.Resolve, 99), len(r.Resolve))
	fmt.Fprintf(w, "turn latency p50 %s p99 %s (n=%d)\n", Pct(r.Turn, 50), Pct(r.Turn, 99), len(r.Turn))
	floor := func(name string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		fp50, fp99 := Pct(ds, 50), Pct(ds, 99)
		fmt.Fprintf(w, "floor %s: bare INSERT commit p50 %s p99 %s (n=%d)", name, fp50, fp99, len(ds))
		if fp50 > 0 && fp99 > 0 && len(r.Resolve) > 0 {
			fmt.Fprintf(w, "; resolve / floor p50 %.2fx p99 %.2fx",
				float64(Pct(r.Resolve, 50))/float64(fp50), float64(Pct(r.Resolve, 99))/float64(fp99))
		}
		fmt.Fprintln(w)
	}
	floor(fmt.Sprintf("at %d concurrent (before the load)", r.Conversations), r.FloorBurst)
	floor("paced, during the load", r.Floor)
	if r.ServerRSS > 0 {
		fmt.Fprintf(w, "server RSS %.1f MB after, peak %.1f MB\n", r.ServerRSS/1e6, r.ServerPeakRSS/1e6)
	}
	for _, e := range r.FirstErrors {
		fmt.Fprintln(w, "error:", e)
	}
}

// Pct is the p-th percentile (nearest rank) of ds, rounded to 10µs.
func Pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(10 * time.Microsecond)
}

type client struct {
	cfg  Config
	http *http.Client
}

// Run drives cfg.Conversations conversations at once and reports what it saw. Failures of
// single conversations are counted in the report; err is only for a run that could not start.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Conversations <= 0 {
		return Report{}, errors.New("loadgen: Conversations must be positive")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: 2*cfg.Conversations + 8,
			IdleConnTimeout:     30 * time.Second,
		}}
		defer hc.CloseIdleConnections()
	}
	c := &client{cfg: cfg, http: hc}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	var mu sync.Mutex
	rep := Report{Conversations: cfg.Conversations}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Errors++
		if len(rep.FirstErrors) < 5 {
			rep.FirstErrors = append(rep.FirstErrors, err.Error())
		}
	}

	if cfg.FloorBurst != nil {
		samples, err := cfg.FloorBurst(ctx, cfg.Conversations)
		rep.FloorBurst = samples
		if err != nil {
			fail(fmt.Errorf("burst floor: %w", err))
		}
	}

	// Side measurements own their goroutines and stop with sideCtx.
	sideCtx, stopSide := context.WithCancel(ctx)
	var side errgroup.Group
	side.Go(func() error {
		peak := c.samplePeakRSS(sideCtx)
		mu.Lock()
		rep.ServerPeakRSS = peak
		mu.Unlock()
		return nil
	})
	if cfg.Floor != nil {
		side.Go(func() error {
			samples, err := cfg.Floor(sideCtx)
			mu.Lock()
			rep.Floor = samples
			mu.Unlock()
			if err != nil {
				fail(fmt.Errorf("floor: %w", err))
			}
			return nil
		})
	}

	start := time.Now()
	var g errgroup.Group
	for i := 0; i < cfg.Conversations; i++ {
		g.Go(func() error {
			res, err := c.conversation(ctx)
			mu.Lock()
			rep.Resolve = append(rep.Resolve, res.resolve...)
			rep.Turn = append(rep.Turn, res.turns...)
			rep.Turns += len(res.turns)
			mu.Unlock()
			if err != nil {
				fail(err)
			}
			return nil
		})
	}
	_ = g.Wait()
	rep.Elapsed = time.Since(start)
	stopSide()
	_ = side.Wait()
	rssCtx, rssCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rssCancel()
	if rss, err := c.serverRSS(rssCtx); err == nil {
		rep.ServerRSS = rss
		rep.ServerPeakRSS = max(rep.ServerPeakRSS, rss)
	}
	return rep, nil
}

// samplePeakRSS reads the server's RSS every second until ctx ends and returns the highest.
func (c *client) samplePeakRSS(ctx context.Context) float64 {
	var peak float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return peak
		case <-tick.C:
			if rss, err := c.serverRSS(ctx); err == nil {
				peak = max(peak, rss)
			}
		}
	}
}

type convResult struct {
	resolve []time.Duration
	turns   []time.Duration
}

// Turns are what each conversation says; the demo model answers the first with a gated
// send_email and the second with an ask_user form.
var Turns = []struct{ Text, Kind string }{
	{"email bob@example.com about lunch", "approval"},
	{"ask me about my preferences", "elicitation"},
}

// conversation creates a conversation, follows its event stream, and runs Turns: it answers
// every call that becomes pending and counts the turn done when the status is idle again.
func (c *client) conversation(ctx context.Context) (convResult, error) {
	var res convResult
	var created struct {
		ID string `json:"id"`
	}
	if err := c.do(ctx, "POST", "/api/v1/conversations", map[string]any{"title": "load"}, http.StatusCreated, &created); err != nil {
		return res, fmt.Errorf("create conversation: %w", err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	events, err := c.stream(sctx, created.ID)
	if err != nil {
		return res, err
	}
	for _, turn := range Turns {
		t0 := time.Now()
		if err := c.do(ctx, "POST", "/api/v1/conversations/"+created.ID+"/messages", map[string]any{"text": turn.Text}, http.StatusAccepted, nil); err != nil {
			return res, fmt.Errorf("send %q: %w", turn.Text, err)
		}
		resolved := map[string]bool{}
	wait:
		for {
			var ev streamEvent
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("turn %q of %s: %w", turn.Text, created.ID, ctx.Err())
			case e, ok := <-events:
				if !ok {
					return res, fmt.Errorf("turn %q of %s: the event stream ended", turn.Text, created.ID)
				}
				ev = e
			}
			switch ev.Type {
			case "turn_error":
				return res, fmt.Errorf("turn %q of %s: turn error: %s", turn.Text, created.ID, ev.Text)
			case "resync", "shutdown":
				return res, fmt.Errorf("turn %q of %s: stream sent %s", turn.Text, created.ID, ev.Type)
			case "status":
				if ev.Status == "idle" && len(resolved) > 0 {
					break wait
				}
			case "tool_call":
				p := ev.Data.Pending
				if ev.Status != "awaiting" || p == nil || resolved[ev.ToolCallID] {
					continue
				}
				if p.Kind != turn.Kind {
					return res, fmt.Errorf("turn %q: pending kind %q, want %q", turn.Text, p.Kind, turn.Kind)
				}
				body := map[string]any{"decision": "approve"}
				if p.Kind == "elicitation" {
					body = map[string]any{"action": "accept", "content": Answer(p.Schema)}
				}
				r0 := time.Now()
				if err := c.do(ctx, "POST", "/api/v1/conversations/"+created.ID+"/calls/"+ev.ToolCallID+"/resolve", body, http.StatusOK, nil); err != nil {
					return res, fmt.Errorf("resolve %s: %w", ev.ToolCallID, err)
				}
				res.resolve = append(res.resolve, time.Since(r0))
				resolved[ev.ToolCallID] = true
			}
		}
		res.turns = append(res.turns, time.Since(t0))
	}
	return res, nil
}

// streamEvent is a live event of the conversation's stream (agent.Event's JSON).
type streamEvent struct {
	Type       string `json:"type"`
	ToolCallID string `json:"tool_call_id"`
	Status     string `json:"status"`
	Text       string `json:"text"`
	Data       struct {
		Pending *struct {
			Kind   string          `json:"kind"`
			Schema json.RawMessage `json:"schema"`
		} `json:"pending"`
	} `json:"data"`
}

// openEvents opens the conversation's event stream (a 200, or an error with the status and the
// start of the body).
func (c *client) openEvents(ctx context.Context, id string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(c.cfg.BaseURL, "/")+"/api/v1/conversations/"+id+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.doRetrying(ctx, req, nil)
	if err != nil {
		return nil, fmt.Errorf("open event stream of %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("open event stream of %s: status %d: %s", id, resp.StatusCode, bytes.TrimSpace(data))
	}
	return resp, nil
}

// stream opens the conversation's event stream and delivers its live events (log entries and
// text deltas are skipped). The channel closes when the stream ends or ctx does. Its buffer is
// bounded; when it is full the reader waits for the conversation's goroutine, its only
// consumer, so nothing is dropped.
func (c *client) stream(ctx context.Context, id string) (<-chan streamEvent, error) {
	return sseEvents(ctx, c, id, func(name string, data []byte) (streamEvent, bool) {
		if name == "entry" || name == "text_delta" || name == "progress" {
			return streamEvent{}, false
		}
		var ev streamEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return streamEvent{}, false
		}
		if ev.Type == "" {
			ev.Type = name
		}
		return ev, true
	})
}

// sseEvents opens the conversation's event stream and delivers what decode makes of each event
// with a data line (its name and data), skipping those it refuses. The channel closes when the
// stream or ctx ends; its buffer is bounded (64) and a full buffer makes the reader wait for its
// consumer: nothing is dropped, the server sees back-pressure.
func sseEvents[T any](ctx context.Context, c *client, id string, decode func(name string, data []byte) (T, bool)) (<-chan T, error) {
	resp, err := c.openEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(chan T, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var name string
		for sc.Scan() {
			line := sc.Bytes()
			switch {
			case bytes.HasPrefix(line, []byte("event: ")):
				name = string(line[len("event: "):])
			case bytes.HasPrefix(line, []byte("data: ")):
				ev, ok := decode(name, line[len("data: "):])
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case len(line) == 0:
				name = ""
			}
		}
	}()
	return out, nil
}

// Answer makes content that satisfies a form schema of the elicitation subset.
func Answer(schema json.RawMessage) map[string]any {
	var s struct {
		Properties map[string]struct {
			Type    string   `json:"type"`
			Format  string   `json:"format"`
			Enum    []string `json:"enum"`
			Minimum *float64 `json:"minimum"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	out := map[string]any{}
	for name, p := range s.Properties {
		switch {
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case p.Type == "boolean":
			out[name] = true
		case p.Type == "integer" || p.Type == "number":
			v := 1.0
			if p.Minimum != nil && *p.Minimum > v {
				v = *p.Minimum
			}
			out[name] = v
		case p.Format == "email":
			out[name] = "load@example.com"
		case p.Format == "date":
			out[name] = "2000-01-02"
		case p.Format == "date-time":
			out[name] = "2000-01-02T03:04:05Z"
		case p.Format == "uri":
			out[name] = "https://example.com/"
		default:
			out[name] = "load test"
		}
	}
	return out
}

// do sends one API request and decodes the answer; 429s are waited out as the server asks.
func (c *client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = b
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.cfg.BaseURL, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.doRetrying(ctx, req, payload)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// doRetrying sends req (with payload as its body), waiting out 429s as Retry-After says, up to
// 20 times. A 429 is the server's budget working, not an error of the run.
func (c *client) doRetrying(ctx context.Context, req *http.Request, payload []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		if payload != nil {
			req.Body = io.NopCloser(bytes.NewReader(payload))
			req.ContentLength = int64(len(payload))
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests || attempt >= 20 {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		t := time.NewTimer(time.Duration(max(wait, 1)) * time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// serverRSS reads process_resident_memory_bytes from the server's /metrics.
func (c *client) serverRSS(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(c.cfg.BaseURL, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("no process_resident_memory_bytes in /metrics")
}
