// Package mcpadapter makes MCP servers tool sources: it connects to the servers the tools file
// lists (a child process over stdio, supervised and restarted with backoff, or streamable HTTP
// with the same SSRF rules as webhooks), lists their tools and keeps the list fresh, and
// registers each allowed tool as "<server>__<tool>" behind the usual validation and approval
// gate. A call travels with its idempotency key in the request's _meta; the server's progress
// notifications become the call's progress, and its elicitations become questions put to the
// conversation's owner (tools.Call.Ask).
//
// MCP servers are untrusted: their descriptions and schemas are bounded and checked (a tool
// whose schema does not compile is skipped, with the reason logged), their read-only hints
// open the gate only when the tools file trusts the server's annotations (TrustAnnotations) and
// never lower what the file sets, their questions are bounded, and their results are bounded
// and made storable.
package mcpadapter

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"parley/internal/tools"
)

// Transports.
const (
	Stdio = "stdio"
	HTTP  = "http"
)

// Config is one MCP server as the tools file declares it, with the environment already read:
// Env and Headers hold values, which are secrets and never logged.
type Config struct {
	Name      string
	Transport string // Stdio or HTTP
	// Command is the child process and its arguments (stdio).
	Command []string
	// Env is the child's environment beside PATH, HOME, LANG and TMPDIR (the child does not
	// inherit Parley's environment, which holds the database URL and provider keys).
	Env map[string]string
	// URL is the streamable HTTP endpoint; Headers are sent on every request (http).
	URL                 string
	Headers             map[string]string
	AllowPrivateNetwork bool
	// Allow lists the server's tools that join the registry, by the server's names; empty
	// allows every tool.
	Allow []string
	// Approval sets a tool's gate by the server's name; it always wins over the server's hints.
	Approval map[string]tools.Approval
	// DefaultApproval, when set, gates every tool Approval does not name, whatever the server's
	// hints say; when empty, every such tool requires approval, unless TrustAnnotations.
	DefaultApproval tools.Approval
	// TrustAnnotations is the file's explicit opt-in to the server's annotations: with it (and
	// neither Approval nor DefaultApproval naming the tool) a tool the server marks read-only
	// runs without approval. Without it annotations are untrusted (as the MCP specification
	// says of a server not trusted) and never open the gate.
	TrustAnnotations bool
	// Timeout bounds each run of a call and each question (0: the app's default).
	Timeout time.Duration
	// MaxAttempts bounds tries of a call that failed retryably (server down, connection lost);
	// 0 means 3.
	MaxAttempts int
	// MaxMessageBytes bounds each message read from the server (a stdio line, an HTTP response
	// body, an SSE event); 0 means DefaultMaxMessageBytes. MaxListBytes bounds one tools/list,
	// all its pages together; 0 means DefaultMaxListBytes. Past either the session fails and is
	// reconnected with backoff (bound.go).
	MaxMessageBytes, MaxListBytes int
}

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,31}$`)

// Separator joins a server's name and its tool's name in the registry.
const Separator = "__"

// Check reports what is wrong with c, nil when nothing is.
func (c Config) Check() error {
	if !serverNameRE.MatchString(c.Name) {
		return fmt.Errorf("server name %q must be 1-32 letters, digits or '-' (it prefixes its tools' names)", c.Name)
	}
	switch c.Transport {
	case Stdio:
		if len(c.Command) == 0 || strings.TrimSpace(c.Command[0]) == "" {
			return fmt.Errorf("server %s: a stdio server needs a command", c.Name)
		}
	case HTTP:
		if c.URL == "" {
			return fmt.Errorf("server %s: an http server needs a url", c.Name)
		}
	default:
		return fmt.Errorf("server %s: transport %q is not one of stdio, http", c.Name, c.Transport)
	}
	for tool, a := range c.Approval {
		if a != tools.Auto && a != tools.RequiresApproval {
			return fmt.Errorf("server %s: approval %q of tool %s is not one of auto, requires_approval", c.Name, a, tool)
		}
	}
	if d := c.DefaultApproval; d != "" && d != tools.Auto && d != tools.RequiresApproval {
		return fmt.Errorf("server %s: default approval %q is not one of auto, requires_approval", c.Name, d)
	}
	if c.MaxMessageBytes < 0 || c.MaxListBytes < 0 {
		return fmt.Errorf("server %s: max_message_bytes and max_list_bytes must be positive", c.Name)
	}
	return nil
}

// approval is the gate of the server's tool named tool: the file's word for it, else the file's
// default, else auto only when the file trusts the server's annotations and the server hints
// the tool is read-only (byHint then reports that the hint opened the gate), else approval.
func (c Config) approval(tool string, readOnlyHint bool) (a tools.Approval, byHint bool) {
	if a, ok := c.Approval[tool]; ok {
		return a, false
	}
	if c.DefaultApproval != "" {
		return c.DefaultApproval, false
	}
	if c.TrustAnnotations && readOnlyHint {
		return tools.Auto, true
	}
	return tools.RequiresApproval, false
}

func (c Config) allows(tool string) bool {
	if len(c.Allow) == 0 {
		return true
	}
	for _, a := range c.Allow {
		if a == tool {
			return true
		}
	}
	return false
}
