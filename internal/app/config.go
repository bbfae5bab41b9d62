package app

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Config is the app's configuration, read from the environment by FromEnv (Variables lists the
// variables; docs/configuration.md says what each means). Tests build it directly.
type Config struct {
	Addr        string // PARLEY_ADDR, default 127.0.0.1:8080
	DatabaseURL string // DATABASE_URL: PostgreSQL when set, else the embedded store
	DataDir     string // PARLEY_DATA_DIR, default ./data
	// Model is PARLEY_MODEL: "demo", "openai:<model>" or "anthropic:<model>"; default demo.
	Model            string
	OpenAIKey        string // OPENAI_API_KEY
	OpenAIBaseURL    string // OPENAI_BASE_URL
	AnthropicKey     string // ANTHROPIC_API_KEY
	AnthropicBaseURL string // ANTHROPIC_BASE_URL
	ToolsPath        string // PARLEY_TOOLS: the tools file, none by default
	// NotifyURL and NotifySecret are PARLEY_NOTIFY_URL and PARLEY_NOTIFY_SECRET: the signed
	// approval notifications (package notify); none when the URL is unset.
	NotifyURL, NotifySecret string
	Production              bool // PARLEY_ENV=production
	// Per-user budgets (0 = the web layer's defaults): PARLEY_MESSAGES_PER_MINUTE,
	// PARLEY_MESSAGE_BURST, PARLEY_API_PER_MINUTE, PARLEY_API_BURST.
	MessagesPerMinute float64
	MessageBurst      int
	APIPerMinute      float64
	APIBurst          int
	// PARLEY_PAGES_PER_MINUTE, PARLEY_PAGE_BURST (page POSTs and socket upgrades) and
	// PARLEY_MAX_CONNS_PER_USER (live sockets and event streams).
	// TrustedProxies are the proxies (CIDRs, PARLEY_TRUSTED_PROXIES, comma-separated) whose
	// X-Forwarded-For names the client; none by default.
	TrustedProxies  []string
	PagesPerMinute  float64
	PageBurst       int
	MaxConnsPerUser int
	// DemoPace is the demo model's pause between text deltas (PARLEY_DEMO_PACE, a Go duration;
	// 0 streams without pausing, as the load test does). Unset keeps the demo's default.
	DemoPace *time.Duration
	// MaxTokens bounds each model answer (PARLEY_MAX_TOKENS; 0 keeps the agent's 4096).
	MaxTokens int
	// MaxAnswerBytes bounds the text of one model answer as it streams (PARLEY_MAX_ANSWER_BYTES;
	// 0 keeps the agent's agent.DefaultMaxAnswerBytes, or 8 bytes per token of MaxTokens).
	MaxAnswerBytes int
	// Caps of the agent (0 keeps its default): PARLEY_MAX_CALLS_PER_ANSWER (16),
	// PARLEY_MAX_TOOL_RUNS (8 per conversation), PARLEY_CONTEXT_BUDGET (100000 tokens),
	// PARLEY_MAX_MODEL_CALLS (64 in flight per process), PARLEY_MAX_ITERATIONS (10 model calls
	// per turn).
	MaxCallsPerAnswer, MaxToolRuns, ContextBudget, MaxModelCalls, MaxIterations int
	// ToolsBudget bounds the estimated tokens of the tool definitions sent with each model
	// call, every source together (PARLEY_TOOLS_BUDGET; 0 keeps DefaultToolsBudget).
	ToolsBudget int
	// DailyTokens is each user's daily budget of model tokens (PARLEY_DAILY_TOKENS; unset: none).
	DailyTokens int
	// SystemPrompt replaces the agent's default system prompt (PARLEY_SYSTEM_PROMPT).
	SystemPrompt string
	// TestTools offers the test tools (echo, failing, count_down) to the model
	// (PARLEY_TEST_TOOLS=true or false); unset, they come with the demo model only: a real model
	// in production is not handed tools that exist to exercise the app.
	TestTools *bool
	// ShutdownTimeout bounds graceful shutdown (PARLEY_SHUTDOWN_TIMEOUT, a Go duration; 15s).
	ShutdownTimeout time.Duration
	// NodeTTL is how long a process of a cluster counts as alive after its last heartbeat
	// (PARLEY_NODE_TTL, a Go duration; cluster.DefaultTTL): a killed process's conversations are
	// taken over by the others within NodeTTL plus PARLEY_ORPHAN_SCAN. PostgreSQL only.
	NodeTTL time.Duration
	// OrphanScan is how often a process looks for conversations whose process died
	// (PARLEY_ORPHAN_SCAN, a Go duration; agent.DefaultOrphanScan).
	OrphanScan time.Duration
	// ClusterKey seals what the processes on one PostgreSQL database send each other: 32
	// random bytes in base64 or hex, the same on every process, never in the database
	// (PARLEY_CLUSTER_KEY, or the file PARLEY_CLUSTER_KEY_FILE names). ClusterKeyPrevious
	// (PARLEY_CLUSTER_KEY_PREVIOUS or _PREVIOUS_FILE) also opens, during a rotation. Required on
	// PostgreSQL in production (clusterkey.go).
	ClusterKey, ClusterKeyFile, ClusterKeyPrevious, ClusterKeyPreviousFile string
	// InboxClaimTTL is how long a reviewer's inbox claim lasts unless renewed or released
	// (PARLEY_INBOX_CLAIM_TTL, a Go duration; agent.DefaultClaimTTL, 10 minutes).
	InboxClaimTTL time.Duration
	// The audit chain's key (store.AuditKey), kept outside the database: PARLEY_AUDIT_KEY (the
	// key itself, at least 32 bytes) or PARLEY_AUDIT_KEY_FILE (a file holding it), not both. One
	// of them is required in production; every process on one database needs the same key. In
	// development without either, a key is generated once in PARLEY_DATA_DIR/audit.key (audit.go).
	AuditKey, AuditKeyFile string
	// AuditAnchorFile is PARLEY_AUDIT_ANCHOR_FILE: the file the chain's signed heads are appended
	// to after each commit, which `web audit verify` checks the chain against (development
	// default: PARLEY_DATA_DIR/audit-anchors.jsonl; none in production unless set).
	// AuditAnchorWebhook (PARLEY_AUDIT_ANCHOR_WEBHOOK=true) also posts each head to
	// PARLEY_NOTIFY_URL.
	AuditAnchorFile    string
	AuditAnchorWebhook bool
	// Getenv reads other variables (webhook secrets named by the tools file).
	Getenv func(string) string
}

// FromEnv reads the configuration through getenv (os.Getenv in the binary). It reads only the
// variables of Variables; Config.Getenv keeps getenv itself, for the variables a tools file names.
func FromEnv(rawGetenv func(string) string) (Config, error) {
	getenv := listed(rawGetenv)
	c := Config{
		Addr:             orDefault(getenv("PARLEY_ADDR"), "127.0.0.1:8080"),
		DatabaseURL:      getenv("DATABASE_URL"),
		DataDir:          orDefault(getenv("PARLEY_DATA_DIR"), "./data"),
		Model:            orDefault(getenv("PARLEY_MODEL"), "demo"),
		OpenAIKey:        getenv("OPENAI_API_KEY"),
		OpenAIBaseURL:    getenv("OPENAI_BASE_URL"),
		AnthropicKey:     getenv("ANTHROPIC_API_KEY"),
		AnthropicBaseURL: getenv("ANTHROPIC_BASE_URL"),
		ToolsPath:        getenv("PARLEY_TOOLS"),
		NotifyURL:        getenv("PARLEY_NOTIFY_URL"),
		NotifySecret:     getenv("PARLEY_NOTIFY_SECRET"),
		ClusterKey:       getenv("PARLEY_CLUSTER_KEY"),
		ClusterKeyFile:   getenv("PARLEY_CLUSTER_KEY_FILE"),
		AuditKey:         getenv("PARLEY_AUDIT_KEY"),
		AuditKeyFile:     getenv("PARLEY_AUDIT_KEY_FILE"),
		AuditAnchorFile:  getenv("PARLEY_AUDIT_ANCHOR_FILE"),
		ShutdownTimeout:  15 * time.Second,
		Getenv:           rawGetenv,
	}
	switch env := getenv("PARLEY_ENV"); env {
	case "", "development":
	case "production":
		c.Production = true
	default:
		return Config{}, fmt.Errorf("PARLEY_ENV must be production or development, not %q", env)
	}
	c.ClusterKeyPrevious, c.ClusterKeyPreviousFile = getenv("PARLEY_CLUSTER_KEY_PREVIOUS"), getenv("PARLEY_CLUSTER_KEY_PREVIOUS_FILE")
	var err error
	num := func(name string, dst *float64) {
		if v := getenv(name); v != "" && err == nil {
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || f <= 0 {
				err = fmt.Errorf("%s must be a positive number, not %q", name, v)
			}
			*dst = f
		}
	}
	integer := func(name string, dst *int) {
		if v := getenv(name); v != "" && err == nil {
			n, perr := strconv.Atoi(v)
			if perr != nil || n <= 0 {
				err = fmt.Errorf("%s must be a positive whole number, not %q", name, v)
			}
			*dst = n
		}
	}
	num("PARLEY_MESSAGES_PER_MINUTE", &c.MessagesPerMinute)
	integer("PARLEY_MESSAGE_BURST", &c.MessageBurst)
	num("PARLEY_API_PER_MINUTE", &c.APIPerMinute)
	integer("PARLEY_API_BURST", &c.APIBurst)
	if v := getenv("PARLEY_TRUSTED_PROXIES"); v != "" && err == nil {
		for _, cidr := range strings.Split(v, ",") {
			cidr = strings.TrimSpace(cidr)
			if _, _, perr := net.ParseCIDR(cidr); perr != nil {
				err = fmt.Errorf("PARLEY_TRUSTED_PROXIES must list CIDRs such as 10.0.0.0/8, not %q", cidr)
				break
			}
			c.TrustedProxies = append(c.TrustedProxies, cidr)
		}
	}
	num("PARLEY_PAGES_PER_MINUTE", &c.PagesPerMinute)
	integer("PARLEY_PAGE_BURST", &c.PageBurst)
	integer("PARLEY_MAX_CONNS_PER_USER", &c.MaxConnsPerUser)
	integer("PARLEY_MAX_TOKENS", &c.MaxTokens)
	integer("PARLEY_MAX_ANSWER_BYTES", &c.MaxAnswerBytes)
	integer("PARLEY_MAX_CALLS_PER_ANSWER", &c.MaxCallsPerAnswer)
	integer("PARLEY_MAX_TOOL_RUNS", &c.MaxToolRuns)
	integer("PARLEY_CONTEXT_BUDGET", &c.ContextBudget)
	integer("PARLEY_TOOLS_BUDGET", &c.ToolsBudget)
	integer("PARLEY_MAX_MODEL_CALLS", &c.MaxModelCalls)
	integer("PARLEY_MAX_ITERATIONS", &c.MaxIterations)
	integer("PARLEY_DAILY_TOKENS", &c.DailyTokens)
	c.SystemPrompt = getenv("PARLEY_SYSTEM_PROMPT")
	duration := func(name string, dst *time.Duration) {
		if v := getenv(name); v != "" && err == nil {
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				err = fmt.Errorf("%s must be a duration such as 5s, not %q", name, v)
			}
			*dst = d
		}
	}
	duration("PARLEY_NODE_TTL", &c.NodeTTL)
	duration("PARLEY_ORPHAN_SCAN", &c.OrphanScan)
	duration("PARLEY_INBOX_CLAIM_TTL", &c.InboxClaimTTL)
	if v := getenv("PARLEY_SHUTDOWN_TIMEOUT"); v != "" && err == nil {
		d, perr := time.ParseDuration(v)
		if perr != nil || d <= 0 {
			err = fmt.Errorf("PARLEY_SHUTDOWN_TIMEOUT must be a duration such as 15s, not %q", v)
		}
		c.ShutdownTimeout = d
	}
	if v := getenv("PARLEY_TEST_TOOLS"); v != "" && err == nil {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			err = fmt.Errorf("PARLEY_TEST_TOOLS must be true or false, not %q", v)
		}
		c.TestTools = &b
	}
	if v := getenv("PARLEY_AUDIT_ANCHOR_WEBHOOK"); v != "" && err == nil {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			err = fmt.Errorf("PARLEY_AUDIT_ANCHOR_WEBHOOK must be true or false, not %q", v)
		}
		c.AuditAnchorWebhook = b
	}
	if err == nil && c.AuditKey != "" && c.AuditKeyFile != "" {
		err = errors.New("set PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE, not both")
	}
	if err == nil && c.AuditAnchorWebhook && c.NotifyURL == "" {
		err = errors.New("PARLEY_AUDIT_ANCHOR_WEBHOOK posts to PARLEY_NOTIFY_URL, which is not set")
	}
	if v := getenv("PARLEY_DEMO_PACE"); v != "" && err == nil {
		d, perr := time.ParseDuration(v)
		if perr != nil || d < 0 {
			err = fmt.Errorf("PARLEY_DEMO_PACE must be a duration such as 8ms or 0, not %q", v)
		}
		c.DemoPace = &d
	}
	if err != nil {
		return Config{}, err
	}
	if _, _, err := c.model(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// model splits Model into provider and model name.
func (c Config) model() (provider, name string, err error) {
	if c.Model == "" || c.Model == "demo" {
		return "demo", "", nil
	}
	p, m, ok := strings.Cut(c.Model, ":")
	if !ok || m == "" || (p != "openai" && p != "anthropic") {
		return "", "", fmt.Errorf("PARLEY_MODEL must be demo, openai:<model> or anthropic:<model>, not %q", c.Model)
	}
	return p, m, nil
}

// sqlitePath is the embedded store's file.
func (c Config) sqlitePath() string { return filepath.Join(c.DataDir, "parley.db") }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
