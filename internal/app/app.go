// Package app wires Parley's parts into one runnable value: the store (PostgreSQL or the
// embedded file), the model provider, the tool registry (built-ins and the tools file), the
// agent's Manager and the web server. cmd/web is a thin main around Main; tests start the same
// App on 127.0.0.1:0 with its data in a temporary directory.
package app

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/cluster"
	"parley/internal/llm"
	"parley/internal/llm/anthropic"
	"parley/internal/llm/demo"
	"parley/internal/llm/openai"
	"parley/internal/notify"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/sqlitestore"
	"parley/internal/telemetry"
	"parley/internal/tools"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/toolsfile"
	"parley/internal/web"
)

// App is a configured, listening Parley. New opens everything and binds the address; Run
// serves until its context ends and then shuts down gracefully; Close releases what New
// opened (Run calls it on its way out).
type App struct {
	cfg      Config
	log      *slog.Logger
	clock    clock.Clock
	store    store.Store
	manager  *agent.Manager
	node     *cluster.Node       // nil on the embedded store
	mcp      *mcpadapter.Manager // nil when the tools file lists no MCP server
	registry *tools.Registry
	unlock   func()          // releases the embedded store's directory; nil on PostgreSQL
	notifier *notify.Webhook // nil unless PARLEY_NOTIFY_URL is set
	web      *web.Server
	http     *http.Server
	listener net.Listener
	console  io.Writer // where the setup link goes (Options.Console)

	// closeAnchors stops the audit chain's anchors (audit.go), after the store: nil until opened.
	closeAnchors func()

	closeOnce sync.Once
	closeErr  error

	tracer *telemetry.Tracer // nil: tracing off (no OTEL_* variables; tracing.go)
}

// Options are test hooks; the binary uses the zero value.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Provider replaces the one PARLEY_MODEL names.
	Provider llm.Provider
	// PasswordCost lowers bcrypt's cost in tests.
	PasswordCost int
	// Console receives the one-time setup link of an empty store (os.Stderr in the binary; nil
	// discards it). It is a secret for the operator, so it never goes through the logger.
	Console io.Writer
}

// New opens the store, builds the tools, the model, the agent and the web server, and binds
// cfg.Addr. On error nothing stays open.
func New(ctx context.Context, cfg Config, opts Options) (_ *App, err error) {
	a := &App{cfg: cfg, log: opts.Logger, clock: opts.Clock, console: opts.Console}
	if a.log == nil {
		a.log = NewLogger(cfg.Production, nil)
	}
	if a.clock == nil {
		a.clock = clock.Real{}
	}
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	if cfg.DatabaseURL == "" {
		if a.unlock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	var keys clusterKeys
	if cfg.DatabaseURL != "" {
		if keys, err = cfg.clusterKeys(a.log); err != nil {
			return nil, err
		}
	}
	anchor, closeAnchors, err := openAuditAnchors(cfg, a.clock, a.log)
	if err != nil {
		return nil, err
	}
	a.closeAnchors = closeAnchors
	if a.store, err = openStore(ctx, cfg, a.log, anchor); err != nil {
		return nil, err
	}
	if a.tracer, err = newTracer(ctx, cfg); err != nil {
		return nil, err
	}
	provider, isDemo := opts.Provider, false
	if provider == nil {
		if provider, isDemo, err = a.provider(); err != nil {
			return nil, err
		}
	}
	testTools := isDemo
	if cfg.TestTools != nil {
		testTools = *cfg.TestTools
	}
	reg, err := a.tools(testTools)
	if err != nil {
		return nil, err
	}
	if err = a.startMCP(ctx, reg); err != nil {
		return nil, err
	}
	a.registry = reg
	acfg := agent.Config{Store: a.store, Provider: provider, Tools: reg, Clock: a.clock, Logger: a.log,
		MaxTokens: cfg.MaxTokens, MaxAnswerBytes: cfg.MaxAnswerBytes, System: cfg.SystemPrompt, MaxCallsPerAnswer: cfg.MaxCallsPerAnswer, MaxToolRuns: cfg.MaxToolRuns,
		ContextBudget: cfg.ContextBudget, MaxModelCalls: cfg.MaxModelCalls, MaxIterations: cfg.MaxIterations,
		DailyTokens: int64(cfg.DailyTokens), OrphanScan: cfg.OrphanScan, Tracer: a.tracer, ClaimTTL: cfg.InboxClaimTTL}
	if pg, ok := a.store.(*pgstore.Store); ok {
		// Every process on PostgreSQL is a node of a cluster, alone or not (internal/cluster).
		a.node = cluster.New(cluster.Config{Pool: pg.Pool(), Logger: a.log, TTL: cfg.NodeTTL,
			Key: keys.current, PreviousKey: keys.previous, OwnKey: keys.own})
		if err = a.node.Start(ctx); err != nil {
			return nil, err
		}
		// Its appends are fenced: refused for a conversation another process took over since.
		pg.SetWriter(a.node.Self())
		acfg.Cluster, acfg.Events = a.node, a.node
	}
	if a.notifier, err = newNotifier(cfg, a.store, a.clock, a.log); err != nil {
		return nil, err
	}
	if a.notifier != nil {
		acfg.Notifier, acfg.NotifyOutbox = a.notifier, true
	}
	a.manager = agent.New(acfg)
	a.web = web.New(web.Config{
		Production: cfg.Production, DemoModel: isDemo, PasswordCost: opts.PasswordCost,
		MessagesPerMinute: cfg.MessagesPerMinute, MessageBurst: cfg.MessageBurst,
		APIPerMinute: cfg.APIPerMinute, APIBurst: cfg.APIBurst,
		PagesPerMinute: cfg.PagesPerMinute, PageBurst: cfg.PageBurst, MaxConnsPerUser: cfg.MaxConnsPerUser,
		TrustedProxies: cfg.TrustedProxies,
	}, web.Deps{Store: a.store, Agent: a.manager, Clock: a.clock, Logger: a.log, ReadyDetails: a.readyDetails()})
	a.http = &http.Server{
		Handler:           a.web.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: event streams and sockets are long-lived and bound their own writes.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	if a.listener, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	return a, nil
}

// NewLogger is the app's structured logger: JSON in production, text otherwise, to w (stderr
// when nil).
func NewLogger(production bool, w io.Writer) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	if production {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// OpenStore opens PostgreSQL when cfg.DatabaseURL is set (its errors name host and database,
// never the password), else the embedded file under cfg.DataDir. Both apply their migrations.
// It is the store of the commands that write no audit record (user add, token create, audit
// export): it links with cfg's audit key when there is one (audit.go) and a random key of its
// own otherwise — even in production, where serving requires the key — and anchors nothing.
// What serves opens its store with openStore.
func OpenStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	key, err := loadAuditKey(cfg, log, false)
	if errors.Is(err, errNoAuditKey) {
		key, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return openStoreKeyed(ctx, cfg, log, key, nil)
}

// openStore is the store that serves: linking audit records with cfg's audit key (required in
// production; generated in development when there is none) and their heads going to anchor
// (nil: nowhere).
func openStore(ctx context.Context, cfg Config, log *slog.Logger, anchor store.AuditAnchor) (store.Store, error) {
	key, err := loadAuditKey(cfg, log, true)
	if err != nil {
		return nil, err
	}
	return openStoreKeyed(ctx, cfg, log, key, anchor)
}

// openStoreKeyed is openStore with key (nil: a random key, for a store that writes no audit
// record).
func openStoreKeyed(ctx context.Context, cfg Config, log *slog.Logger, key *store.AuditKey, anchor store.AuditAnchor) (store.Store, error) {
	if cfg.DatabaseURL != "" {
		opts := []pgstore.Option{pgstore.WithAuditKey(key)}
		if anchor != nil {
			opts = append(opts, pgstore.WithAuditAnchor(anchor))
		}
		st, err := pgstore.Open(ctx, cfg.DatabaseURL, log, opts...)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	opts := []sqlitestore.Option{sqlitestore.WithLogger(log), sqlitestore.WithAuditKey(key)}
	if anchor != nil {
		opts = append(opts, sqlitestore.WithAuditAnchor(anchor))
	}
	st, err := sqlitestore.Open(ctx, cfg.sqlitePath(), opts...)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// outbox adapts the store's outbox to send_email.
type outbox struct{ st store.Store }

func (o outbox) Send(ctx context.Context, call tools.Call, msg tools.Email) (string, error) {
	m, err := o.st.AddOutbox(ctx, store.OutboxMessage{
		ConversationID: call.ConversationID, ToolCallID: call.ToolCallID, To: msg.To, Subject: msg.Subject, Body: msg.Body,
	})
	if err != nil {
		return "", fmt.Errorf("write outbox: %w", err)
	}
	return strconv.FormatInt(m.ID, 10), nil
}

// DefaultToolsBudget is PARLEY_TOOLS_BUDGET's default: the estimated tokens of tool definitions
// sent with each model call (a third of the default context budget).
const DefaultToolsBudget = 32_000

// tools is the registry: the built-ins (with the test tools echo, failing and count_down only
// when testTools), then the tools file's tools, within the definitions budget.
func (a *App) tools(testTools bool) (*tools.Registry, error) {
	all := tools.Builtins(tools.BuiltinDeps{Clock: a.clock, Outbox: outbox{a.store}, TestTools: testTools})
	if a.cfg.ToolsPath != "" {
		fromFile, err := toolsfile.Load(a.cfg.ToolsPath, toolsfile.Env{Production: a.cfg.Production, Getenv: a.cfg.Getenv})
		if err != nil {
			return nil, err
		}
		all = append(all, fromFile...)
	}
	reg, err := tools.NewRegistry(all...)
	if err != nil {
		return nil, fmt.Errorf("tools: %w", err)
	}
	reg.SetDefinitionBudget(cmp.Or(a.cfg.ToolsBudget, DefaultToolsBudget), a.log)
	return reg, nil
}

// startMCP connects to the MCP servers the tools file lists (none: nothing to do), registering
// the tools of those that answer before the app serves; a server that is down is retried in
// the background.
func (a *App) startMCP(ctx context.Context, reg *tools.Registry) error {
	if a.cfg.ToolsPath == "" {
		return nil
	}
	cfgs, err := toolsfile.LoadMCP(a.cfg.ToolsPath, toolsfile.Env{Production: a.cfg.Production, Getenv: a.cfg.Getenv})
	if err != nil || len(cfgs) == 0 {
		return err
	}
	a.mcp, err = mcpadapter.New(cfgs, mcpadapter.Options{Registry: reg, Logger: a.log, Clock: a.clock, Production: a.cfg.Production})
	if err != nil {
		return err
	}
	a.mcp.Start(ctx)
	return nil
}

// readyDetails reports on /readyz the MCP servers (when there are any) and the tool definitions
// the budget leaves out (when it leaves any out).
func (a *App) readyDetails() func() map[string]any {
	return func() map[string]any {
		d := map[string]any{}
		if a.mcp != nil {
			d["mcp_servers"] = a.mcp.Status()
		}
		if tokens, leftOut := a.registry.Offer(); len(leftOut) > 0 {
			d["tool_definitions"] = map[string]any{"offered_tokens": tokens, "left_out": leftOut}
		}
		if len(d) == 0 {
			return nil
		}
		return d
	}
}

// provider builds the model PARLEY_MODEL names; it reports whether it is the demo.
func (a *App) provider() (llm.Provider, bool, error) {
	kind, model, err := a.cfg.model()
	if err != nil {
		return nil, false, err
	}
	switch kind {
	case "openai":
		p, err := openai.New(openai.Config{APIKey: a.cfg.OpenAIKey, BaseURL: a.cfg.OpenAIBaseURL, Model: model, Clock: a.clock, HTTPClient: a.modelClient()})
		return p, false, err
	case "anthropic":
		p, err := anthropic.New(anthropic.Config{APIKey: a.cfg.AnthropicKey, BaseURL: a.cfg.AnthropicBaseURL, Model: model, Clock: a.clock, HTTPClient: a.modelClient()})
		return p, false, err
	}
	if a.cfg.OpenAIKey != "" || a.cfg.AnthropicKey != "" {
		a.log.Warn("a provider key is set but PARLEY_MODEL is not: using the demo model; set PARLEY_MODEL=openai:<model> or anthropic:<model>")
	}
	dc := demo.Config{Clock: a.clock}
	if a.cfg.DemoPace != nil {
		dc.Pace = *a.cfg.DemoPace
		if dc.Pace == 0 {
			dc.Pace = demo.NoPace
		}
	}
	return demo.New(dc), true, nil
}

// URL is the app's base URL, e.g. http://127.0.0.1:41234.
func (a *App) URL() string { return "http://" + a.listener.Addr().String() }

// Store is the app's store (tests and commands use it).
func (a *App) Store() store.Store { return a.store }

// Run starts the agent (reviving conversations that were mid-turn) and serves HTTP until ctx
// ends; then it shuts down within cfg.ShutdownTimeout: stop accepting, end event streams and
// sockets (going away), let in-flight requests finish, park turns, close the store.
func (a *App) Run(ctx context.Context) error {
	if err := a.manager.Start(ctx); err != nil {
		_ = a.manager.Close(context.Background())
		_ = a.Close()
		return fmt.Errorf("start agent: %w", err)
	}
	a.log.Info("parley listening", "url", a.URL(), "store", a.storeKind(), "model", a.cfg.Model)
	if err := a.offerSetup(ctx); err != nil {
		a.log.Warn("setup link", "err", err)
	}
	served := make(chan error, 1)
	go func() { served <- a.http.Serve(a.listener) }()
	sweepCtx, stopSweeping := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		a.sweepSessions(sweepCtx)
	}()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	stopSweeping()
	<-swept
	a.log.Info("shutting down")
	shutdownErr := a.shutdown()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errors.Join(fmt.Errorf("serve: %w", serveErr), shutdownErr)
	}
	return shutdownErr
}

// sessionSweep is how often expired sessions are deleted.
const sessionSweep = time.Hour

// sweepSessions deletes expired session rows, and sign-in limits whose window ended, now and
// every sessionSweep until ctx ends (an expired session is refused at once anyway; this keeps
// the tables from growing). With several
// processes each sweeps; the deletes are idempotent.
func (a *App) sweepSessions(ctx context.Context) {
	clk := a.clock
	if clk == nil {
		clk = clock.Real{}
	}
	timer := clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			if n, err := a.store.PurgeSessions(ctx, clk.Now()); err != nil && ctx.Err() == nil {
				a.log.Warn("purge expired sessions", "err", err)
			} else if n > 0 {
				a.log.Info("purged expired sessions", "count", n)
			}
			if n, err := a.web.SweepSignIns(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("sweep sign-in limits", "err", err)
			} else if n > 0 {
				a.log.Info("swept sign-in limits whose window ended", "count", n)
			}
			timer.Reset(sessionSweep)
		}
	}
}

func (a *App) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	a.web.Shutdown()
	var errs []error
	if err := a.http.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop HTTP: %w", err))
		_ = a.http.Close()
	}
	if err := a.manager.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop agent: %w", err))
	}
	if a.node != nil {
		// Leaving hands the rest over; it gets its own few seconds even when the drain used up
		// the shutdown's time.
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := a.node.Leave(lctx); err != nil {
			errs = append(errs, err)
		}
		lcancel()
	}
	if err := a.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *App) storeKind() string {
	if a.cfg.DatabaseURL != "" {
		return "postgresql"
	}
	return "embedded:" + a.cfg.sqlitePath()
}

// Close releases the listener and the store. It is safe to call more than once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		if a.listener != nil {
			_ = a.listener.Close() // already closed after Serve; the error says nothing new
		}
		if a.node != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = a.node.Leave(ctx) // after a shutdown it has left already; else it must not outlive the store
			cancel()
		}
		if a.mcp != nil {
			a.mcp.Stop() // ends the stdio servers' processes
		}
		if a.notifier != nil {
			a.notifier.Close()
		}
		if a.store != nil {
			if err := a.store.Close(); err != nil {
				a.closeErr = fmt.Errorf("close store: %w", err)
			}
		}
		if a.closeAnchors != nil {
			a.closeAnchors() // after the store: its last heads are written
		}
		if a.unlock != nil {
			a.unlock()
		}
		if err := a.closeTracer(); err != nil {
			a.closeErr = errors.Join(a.closeErr, err)
		}
	})
	return a.closeErr
}

// offerSetup prints a one-time link that creates the first admin, when the store has no
// account yet: sign-up is closed by default, so a fresh deployment is not the first visitor's.
// Only the token's SHA-256 is stored (any process on the database accepts it); each start makes
// a new one, and the first admin's creation clears it.
func (a *App) offerSetup(ctx context.Context) error {
	n, err := a.store.CountUsers(ctx)
	if err != nil || n > 0 {
		return err
	}
	token := auth.NewSecret("ps_")
	if err := a.store.SetSetting(ctx, "setup_token", hex.EncodeToString(auth.Hash(token))); err != nil {
		return fmt.Errorf("store the setup token: %w", err)
	}
	a.log.Info("no account yet: the one-time setup link is printed on the console (or run `web user add`)")
	if a.console != nil {
		fmt.Fprintf(a.console, "\nNo account yet. Create the first administrator at:\n\n    %s%s\n\n", a.URL(), web.SetupPath(token))
	}
	return nil
}
