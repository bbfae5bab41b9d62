package main

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
	Timeout       time.Duration
	Poll          time.Duration
	Client        *http.Client
}

// Report is what a run measured.
type Report struct {
	Conversations int
	Turns         int
	Errors        int
	FirstErrors   []string
	Elapsed       time.Duration
	Resolve       []time.Duration // acknowledgement latency of each resolve
	Turn          []time.Duration // message sent → conversation idle again
	ServerRSS     float64         // bytes, from process_resident_memory_bytes after the run
}

// Print writes the report as plain lines.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "conversations %d, turns %d, errors %d, elapsed %s\n", r.Conversations, r.Turns, r.Errors, r.Elapsed.Round(time.Millisecond))
	if r.Elapsed > 0 {
		fmt.Fprintf(w, "throughput %.1f turns/s\n", float64(r.Turns)/r.Elapsed.Seconds())
	}
	fmt.Fprintf(w, "resolve latency p50 %s p99 %s (n=%d)\n", pct(r.Resolve, 50), pct(r.Resolve, 99), len(r.Resolve))
	fmt.Fprintf(w, "turn latency p50 %s p99 %s (n=%d)\n", pct(r.Turn, 50), pct(r.Turn, 99), len(r.Turn))
	if r.ServerRSS > 0 {
		fmt.Fprintf(w, "server RSS %.1f MB\n", r.ServerRSS/1e6)
	}
	for _, e := range r.FirstErrors {
		fmt.Fprintln(w, "error:", e)
	}
}

func pct(ds []time.Duration, p int) time.Duration {
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

// Run drives cfg.Conversations conversations at once and reports what it saw.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Conversations + 8}}
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
	if rss, err := c.serverRSS(context.Background()); err == nil {
		rep.ServerRSS = rss
	}
	return rep, nil
}

type convResult struct {
	resolve []time.Duration
	turns   []time.Duration
}

// conversation runs the two turns: a gated send_email approved by us, and a question answered.
func (c *client) conversation(ctx context.Context) (convResult, error) {
	var res convResult
	var created struct {
		ID string `json:"id"`
	}
	if err := c.do(ctx, "POST", "/api/v1/conversations", map[string]any{"title": "load"}, http.StatusCreated, &created); err != nil {
		return res, fmt.Errorf("create conversation: %w", err)
	}
	turns := []struct {
		text string
		kind string
	}{
		{"email bob@example.com about lunch", "approval"},
		{"ask me about my preferences", "elicitation"},
	}
	for _, turn := range turns {
		t0 := time.Now()
		if err := c.do(ctx, "POST", "/api/v1/conversations/"+created.ID+"/messages", map[string]any{"text": turn.text}, http.StatusAccepted, nil); err != nil {
			return res, fmt.Errorf("send %q: %w", turn.text, err)
		}
		resolved := false
		for {
			conv, err := c.get(ctx, created.ID)
			if err != nil {
				return res, err
			}
			if id, p, ok := firstPending(conv); ok {
				if p.Kind != turn.kind {
					return res, fmt.Errorf("turn %q: pending kind %q, want %q", turn.text, p.Kind, turn.kind)
				}
				body := map[string]any{"decision": "approve"}
				if p.Kind == "elicitation" {
					body = map[string]any{"action": "accept", "content": answer(p.Schema)}
				}
				r0 := time.Now()
				if err := c.do(ctx, "POST", "/api/v1/conversations/"+created.ID+"/calls/"+id+"/resolve", body, http.StatusOK, nil); err != nil {
					return res, fmt.Errorf("resolve %s: %w", id, err)
				}
				res.resolve = append(res.resolve, time.Since(r0))
				resolved = true
			} else if resolved && conv.Status == "idle" {
				break
			}
			select {
			case <-ctx.Done():
				return res, fmt.Errorf("turn %q: %w (status %s)", turn.text, ctx.Err(), conv.Status)
			case <-time.After(c.cfg.Poll):
			}
		}
		res.turns = append(res.turns, time.Since(t0))
	}
	return res, nil
}

type pending struct {
	Kind   string          `json:"kind"`
	Schema json.RawMessage `json:"schema"`
}

type conversation struct {
	Status  string             `json:"status"`
	Pending map[string]pending `json:"pending"`
}

func firstPending(c conversation) (string, pending, bool) {
	for id, p := range c.Pending {
		return id, p, true
	}
	return "", pending{}, false
}

func (c *client) get(ctx context.Context, id string) (conversation, error) {
	var conv conversation
	err := c.do(ctx, "GET", "/api/v1/conversations/"+id, nil, http.StatusOK, &conv)
	return conv, err
}

// answer makes content that satisfies a form schema of the elicitation subset.
func answer(schema json.RawMessage) map[string]any {
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

func (c *client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.cfg.BaseURL, "/")+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusTooManyRequests && attempt < 20 {
			// Honour the server's limit rather than counting it as an error.
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			}
			continue
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
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("no process_resident_memory_bytes in /metrics")
}
