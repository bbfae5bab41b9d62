package mcpadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"parley/internal/clock"
	"parley/internal/tools"
	"parley/internal/tools/httpadapter"
	"parley/internal/tools/webhook"
)

// Options are what the host gives the adapter.
type Options struct {
	// Registry receives each server's tools (tools.Registry.SetSource, by server name).
	Registry *tools.Registry
	Logger   *slog.Logger
	// Clock times backoff and health checks; nil is the wall clock.
	Clock clock.Clock
	// Production refuses plain-HTTP server URLs, as for webhooks.
	Production bool
	// ConnectTimeout bounds connecting and listing tools; 0 means 20 s.
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before reconnecting (doubling from the first to
	// the second); 0 means 250 ms and 30 s.
	MinBackoff, MaxBackoff time.Duration
	// PingEvery is how often a connected server is pinged (a server that does not answer is
	// reconnected); 0 means 30 s.
	PingEvery time.Duration
	// RelistEvery is the least time between two listings of a server's tools on its
	// notifications that the list changed: a change inside it is listed once when it ends (so
	// the last change is never lost); 0 means 5 s. A listing that fails ends the session, which
	// is reconnected with the backoff above.
	RelistEvery time.Duration
	// HTTPClient builds the client of an http server from its dial policy; nil uses
	// httpadapter.NewClient (no proxy, no redirects, private addresses refused unless allowed).
	HTTPClient func(httpadapter.DialPolicy) *http.Client
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 20 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.PingEvery <= 0 {
		o.PingEvery = 30 * time.Second
	}
	if o.RelistEvery <= 0 {
		o.RelistEvery = 5 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = httpadapter.NewClient
	}
	return o
}

// Server states, as /readyz and /metrics show them.
const (
	StateConnecting = "connecting"
	StateUp         = "up"
	StateDown       = "down"
)

// Status is one server as an operator sees it.
type Status struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"`
	State     string    `json:"state"`
	Tools     int       `json:"tools"`
	Restarts  int       `json:"restarts"`
	Since     time.Time `json:"since"`
	// LastError is why the server is down (or last went down); it never holds a header or
	// environment value.
	LastError string `json:"last_error,omitempty"`
}

// Manager runs the MCP servers of the tools file: one supervising goroutine per server, which
// alone connects, lists and reconnects. Start it once; Stop stops them all and waits.
type Manager struct {
	opts    Options
	servers []*server

	stopOnce   sync.Once
	cancel     context.CancelFunc // set by Start
	wg         sync.WaitGroup
	unregister func()
}

// New checks the configurations and builds the servers' clients; nothing connects until Start.
func New(cfgs []Config, opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	if opts.Registry == nil {
		return nil, errors.New("mcp: no registry")
	}
	m := &Manager{opts: opts}
	seen := map[string]bool{}
	for _, c := range cfgs {
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("mcp: %w", err)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("mcp: server name %q is used twice", c.Name)
		}
		seen[c.Name] = true
		if c.Transport == HTTP {
			if _, err := webhook.CheckURL(c.URL, opts.Production, c.AllowPrivateNetwork); err != nil {
				return nil, fmt.Errorf("mcp: server %s: %w", c.Name, err)
			}
		}
		m.servers = append(m.servers, newServer(m, c))
	}
	// Each server's tools take its place in the registry in the file's order, whichever
	// answers first: the order in which a definitions budget keeps tools.
	for _, s := range m.servers {
		if err := opts.Registry.SetSource(sourcePrefix+s.cfg.Name, nil); err != nil {
			return nil, fmt.Errorf("mcp: server %s: %w", s.cfg.Name, err)
		}
	}
	return m, nil
}

// Start starts every server's supervisor and waits until each has tried to connect once (or
// ctx ends): the tools of a server that answers are registered before the app serves. A server
// that is down does not stop the start; it keeps being retried with backoff.
func (m *Manager) Start(ctx context.Context) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	m.unregister = register(m)
	for _, s := range m.servers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.run(runCtx)
		}()
	}
	for _, s := range m.servers {
		select {
		case <-s.tried:
		case <-ctx.Done():
			return
		}
	}
}

// Stop stops every supervisor (closing its session, which ends a child process) and waits for
// them. It is idempotent and safe before Start.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		if m.cancel != nil {
			m.cancel()
		}
		m.wg.Wait()
		if m.unregister != nil {
			m.unregister()
		}
	})
}

// Status lists the servers in the tools file's order.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// server is one MCP server. Its session is owned by run (the supervisor), which alone
// connects, lists and closes; calls read the current session under mu.
type server struct {
	m      *Manager
	cfg    Config
	log    *slog.Logger
	client *mcp.Client
	// listChanged is a coalescing doorbell (size 1; a ring while one is pending is dropped,
	// since one listing answers both): the server said its tools changed.
	listChanged chan struct{}
	// broken is a coalescing doorbell (size 1): a call saw the connection fail.
	broken chan struct{}
	// tried is closed after the first connection attempt, whatever its outcome.
	tried     chan struct{}
	triedOnce sync.Once
	// opened is owned by run (refresh): the tools the last list opened on a trusted hint, so
	// that they are logged when the set changes rather than at every list.
	opened []string

	mu       sync.Mutex
	session  *mcp.ClientSession   // guarded by mu; nil while not connected
	state    string               // guarded by mu
	since    time.Time            // guarded by mu
	lastErr  string               // guarded by mu
	restarts int                  // guarded by mu
	nTools   int                  // guarded by mu
	inflight map[string]*inflight // guarded by mu: calls under way, by progress token
}

func newServer(m *Manager, c Config) *server {
	s := &server{
		m: m, cfg: c, log: m.opts.Logger.With("mcp_server", c.Name),
		listChanged: make(chan struct{}, 1), broken: make(chan struct{}, 1), tried: make(chan struct{}),
		state: StateConnecting, since: m.opts.Clock.Now(), inflight: map[string]*inflight{},
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "parley", Version: "1"}, &mcp.ClientOptions{
		Logger:                      s.log,
		ElicitationHandler:          s.elicit,
		ProgressNotificationHandler: s.progress,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			ring(s.listChanged)
		},
		// Input-required results come back to callFunc, which asks and keeps the request
		// state with the question (call.go).
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{
			Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{},
		}},
	})
	return s
}

// ring rings a coalescing doorbell: a ring while one is pending is dropped.
func ring(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{Name: s.cfg.Name, Transport: s.cfg.Transport, State: s.state, Tools: s.nTools,
		Restarts: s.restarts, Since: s.since, LastError: s.lastErr}
}

func (s *server) current() (*mcp.ClientSession, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session, s.lastErr
}

func (s *server) setState(cs *mcp.ClientSession, state string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != state {
		s.since = s.m.opts.Clock.Now()
	}
	s.session, s.state = cs, state
	if err != nil {
		s.lastErr = bounded(err.Error(), 500)
	}
}

// stableAfter is how long a connection must last for the backoff to start over.
const stableAfter = time.Minute

// run is the supervisor: connect and list, then watch the session (its end, list changes,
// failed calls, failed pings) until ctx ends; after a failure wait with backoff and start over.
func (s *server) run(ctx context.Context) {
	clk := s.m.opts.Clock
	failures := 0
	for {
		cs, err := s.connect(ctx)
		if err == nil {
			err = s.refresh(ctx, cs)
			if err != nil {
				_ = cs.Close()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.setState(nil, StateDown, err)
			s.logFailure("mcp server unavailable", err, "attempt", failures+1)
		} else {
			s.setState(cs, StateUp, nil)
			s.log.Info("mcp server connected", "tools", s.status().Tools)
		}
		s.triedOnce.Do(func() { close(s.tried) })
		if err == nil {
			upAt := clk.Now()
			err = s.watch(ctx, cs)
			if ctx.Err() != nil {
				s.setState(nil, StateDown, errors.New("stopped"))
				return
			}
			s.setState(nil, StateDown, err)
			s.logFailure("mcp server connection ended", err)
			if clk.Now().Sub(upAt) >= stableAfter {
				failures = 0
			}
		}
		failures++
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		t := clk.NewTimer(s.backoff(failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// logFailure logs why a session failed; a server that sent more than a bound allows is said to
// have done so, with the bounds.
func (s *server) logFailure(msg string, err error, attrs ...any) {
	if overflowed(err) {
		msg = "mcp server sent more than its bounds allow; its session is dropped and reconnected with backoff"
		attrs = append(attrs, "max_message_bytes", s.cfg.maxMessage(), "max_list_bytes", s.cfg.maxList())
	}
	s.log.Warn(msg, append([]any{"err", err}, attrs...)...)
}

func (s *server) backoff(failures int) time.Duration {
	d := s.m.opts.MinBackoff
	for i := 1; i < failures && d < s.m.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.m.opts.MaxBackoff)
}

// watch serves a connected session until it ends: it relists on a list change (at most once
// every RelistEvery, the last change of a burst listed when the interval ends) and reconnects
// after a failed call, ping or listing. It always closes the session and waits for it.
func (s *server) watch(ctx context.Context, cs *mcp.ClientSession) error {
	// A ring left by a call on the previous session is about that one, not this.
	select {
	case <-s.broken:
	default:
	}
	clk := s.m.opts.Clock
	closed := make(chan error, 1)
	go func() { closed <- cs.Wait() }()
	ping := clk.NewTimer(s.m.opts.PingEvery)
	defer ping.Stop()
	// The list was read when the session connected. A change heard before RelistEvery has
	// passed since is listed when it has: relist is armed meanwhile (nil otherwise).
	listedAt := clk.Now()
	var relist clock.Timer
	var relistC <-chan time.Time
	defer func() {
		if relist != nil {
			relist.Stop()
		}
	}()
	end := func(err error) error {
		_ = cs.Close()
		<-closed
		return err
	}
	list := func() error {
		listedAt = clk.Now()
		if err := s.refresh(ctx, cs); err != nil {
			return end(fmt.Errorf("relist tools: %w", err))
		}
		s.log.Info("mcp server tools changed", "tools", s.status().Tools)
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return end(ctx.Err())
		case err := <-closed:
			// Close all the same: it ends what the session started besides the connection
			// (the list-changed subscription's goroutine waits for it).
			_ = cs.Close()
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return fmt.Errorf("connection closed: %w", err)
		case <-s.listChanged:
			if relist != nil {
				continue // already due when the interval ends
			}
			if wait := listedAt.Add(s.m.opts.RelistEvery).Sub(clk.Now()); wait > 0 {
				relist = clk.NewTimer(wait)
				relistC = relist.C()
				continue
			}
			if err := list(); err != nil {
				return err
			}
		case <-relistC:
			relist, relistC = nil, nil
			if err := list(); err != nil {
				return err
			}
		case <-s.broken:
			return end(errors.New("a call found the connection broken"))
		case <-ping.C():
			pctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
			err := cs.Ping(pctx, nil)
			cancel()
			if err != nil {
				return end(fmt.Errorf("ping: %w", err))
			}
			ping.Reset(s.m.opts.PingEvery)
		}
	}
}

// connect opens a session over the server's transport, bounded by the connect timeout.
func (s *server) connect(ctx context.Context) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	var t mcp.Transport
	switch s.cfg.Transport {
	case Stdio:
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Env = childEnv(s.cfg.Env)
		cmd.Stderr = &stderrLog{log: s.log}
		cmd.WaitDelay = 2 * time.Second // a grandchild holding stderr open cannot hang Close
		t = &commandTransport{cmd: cmd, terminate: 2 * time.Second, maxLine: s.cfg.maxMessage()}
	case HTTP:
		hc := s.m.opts.HTTPClient(httpadapter.DialPolicy{AllowPrivateNetwork: s.cfg.AllowPrivateNetwork})
		hc.Transport = boundBodies{max: s.cfg.maxMessage(),
			base: callStreams{base: headerTransport{base: hc.Transport, headers: s.cfg.Headers}}}
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc, MaxRetries: 1, MaxEventSize: s.cfg.maxMessage()}
	}
	cs, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return cs, nil
}

// childEnv is a stdio server's environment: the basics a program needs to start, and what the
// tools file maps; nothing else of Parley's.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// headerTransport adds the configured headers to every request to an http server.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	if len(h.headers) == 0 {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return base.RoundTrip(r)
}

// stderrLog logs a child's standard error line by line, each line bounded. exec's copying
// goroutine is its only writer.
type stderrLog struct {
	log     *slog.Logger
	partial []byte
}

const maxStderrLine = 2000

func (w *stderrLog) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := indexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			if len(w.partial) > maxStderrLine {
				w.flush()
			}
			break
		}
		w.partial = append(w.partial, p[:i]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *stderrLog) flush() {
	if len(w.partial) > 0 {
		w.log.Info("mcp server stderr", "line", bounded(string(w.partial), maxStderrLine))
	}
	w.partial = w.partial[:0]
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
