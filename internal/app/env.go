package app

import (
	"fmt"
	"slices"
)

// Variables is every environment variable the binary reads as configuration, in the order
// docs/configuration.md lists them: FromEnv's, the healthcheck's, the tracer's
// (internal/telemetry) and the profiling build's (cmd/web/pprof.go). FromEnv and the
// healthcheck read through listed, which refuses a name missing here, and TestConfigurationDoc
// fails when this list, the page's table and the string literals of the binary's code differ:
// a variable is documented before it is read.
//
// Variables a tools file names (webhook secrets, MCP servers' env and headers_env) are the
// operator's choice, read through Config.Getenv, and are not listed.
var Variables = []string{
	"PARLEY_ADDR",
	"DATABASE_URL",
	"PARLEY_DATA_DIR",
	"PARLEY_ENV",
	"PARLEY_MODEL",
	"OPENAI_API_KEY",
	"OPENAI_BASE_URL",
	"ANTHROPIC_API_KEY",
	"ANTHROPIC_BASE_URL",
	"PARLEY_TOOLS",
	"PARLEY_TEST_TOOLS",
	"PARLEY_SYSTEM_PROMPT",
	"PARLEY_DEMO_PACE",
	"PARLEY_MAX_TOKENS",
	"PARLEY_MAX_ANSWER_BYTES",
	"PARLEY_MAX_ITERATIONS",
	"PARLEY_MAX_CALLS_PER_ANSWER",
	"PARLEY_MAX_TOOL_RUNS",
	"PARLEY_MAX_MODEL_CALLS",
	"PARLEY_CONTEXT_BUDGET",
	"PARLEY_TOOLS_BUDGET",
	"PARLEY_DAILY_TOKENS",
	"PARLEY_MESSAGES_PER_MINUTE",
	"PARLEY_MESSAGE_BURST",
	"PARLEY_API_PER_MINUTE",
	"PARLEY_API_BURST",
	"PARLEY_PAGES_PER_MINUTE",
	"PARLEY_PAGE_BURST",
	"PARLEY_MAX_CONNS_PER_USER",
	"PARLEY_TRUSTED_PROXIES",
	"PARLEY_INBOX_CLAIM_TTL",
	"PARLEY_NOTIFY_URL",
	"PARLEY_NOTIFY_SECRET",
	"PARLEY_SHUTDOWN_TIMEOUT",
	"PARLEY_NODE_TTL",
	"PARLEY_ORPHAN_SCAN",
	"PARLEY_CLUSTER_KEY",
	"PARLEY_CLUSTER_KEY_FILE",
	"PARLEY_CLUSTER_KEY_PREVIOUS",
	"PARLEY_CLUSTER_KEY_PREVIOUS_FILE",
	"PARLEY_AUDIT_KEY",
	"PARLEY_AUDIT_KEY_FILE",
	"PARLEY_AUDIT_ANCHOR_FILE",
	"PARLEY_AUDIT_ANCHOR_WEBHOOK",
	"OTEL_SDK_DISABLED",
	"OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"PARLEY_PPROF_ADDR",
}

// listed wraps getenv so that reading a variable missing from Variables panics: a programming
// error that every test of FromEnv hits at once.
func listed(getenv func(string) string) func(string) string {
	return func(name string) string {
		if !slices.Contains(Variables, name) {
			panic(fmt.Sprintf("app: %s is read as configuration but missing from Variables (and docs/configuration.md)", name))
		}
		return getenv(name)
	}
}
