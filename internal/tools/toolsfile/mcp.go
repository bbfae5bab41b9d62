package toolsfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"parley/internal/tools"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/webhook"
)

// mcpServerJSON is one entry of the file's top-level "mcp_servers" (its shape is checked by the
// schema first).
type mcpServerJSON struct {
	Name                string            `json:"name"`
	Transport           string            `json:"transport"`
	Command             []string          `json:"command"`
	Env                 map[string]string `json:"env"`
	URL                 string            `json:"url"`
	HeadersEnv          map[string]string `json:"headers_env"`
	AllowPrivateNetwork bool              `json:"allow_private_network"`
	TimeoutSecs         int               `json:"timeout_secs"`
	MaxRetries          *int              `json:"max_retries"`
	TrustAnnotations    bool              `json:"trust_annotations"`
	MaxMessageBytes     int               `json:"max_message_bytes"`
	MaxListBytes        int               `json:"max_list_bytes"`
	Tools               struct {
		Allow           []string                  `json:"allow"`
		Approval        map[string]tools.Approval `json:"approval"`
		DefaultApproval tools.Approval            `json:"default_approval"`
	} `json:"tools"`
}

// LoadMCP reads the MCP servers of the tools file at path (none when it lists none).
func LoadMCP(path string, env Env) ([]mcpadapter.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tools file: %w", err)
	}
	cfgs, err := ParseMCP(data, env)
	var fe *Error
	if errors.As(err, &fe) {
		fe.File = path
	}
	return cfgs, err
}

// ParseMCP validates the tools file against its schema and builds the configurations of its
// "mcp_servers": each variable named by env and headers_env is read from the environment now
// (a missing one is a problem: a secret never sits in the file), and an http server's URL
// passes the webhooks' rules (http or https, no userinfo, a private host only with
// allow_private_network, https in production). On any problem it returns none and an *Error
// listing all of them.
func ParseMCP(data []byte, env Env) ([]mcpadapter.Config, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	schema, err := compiled()
	if err != nil {
		return nil, err
	}
	doc, err := tools.DecodeJSON(data)
	if err != nil {
		return nil, &Error{Problems: []Problem{{Path: "", Message: "the file is not valid JSON: " + err.Error()}}}
	}
	var problems []Problem
	if err := schema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("validate tools file: %w", err)
		}
		// Parse reports every problem of the file; here only those of mcp_servers stop the servers.
		for _, p := range tools.Problems(ve) {
			if strings.HasPrefix(p.Path, "/mcp_servers") {
				problems = append(problems, Problem{Path: p.Path, Message: schemaMessage(doc, p.Path, p.Message)})
			}
		}
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	var raw struct {
		Servers []mcpServerJSON `json:"mcp_servers"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, &Error{Problems: []Problem{{Path: "/mcp_servers", Message: err.Error()}}}
	}
	var out []mcpadapter.Config
	seen := map[string]int{}
	for i, s := range raw.Servers {
		base := "/mcp_servers/" + strconv.Itoa(i)
		add := func(path, format string, args ...any) {
			problems = append(problems, Problem{Path: base + path, Tool: s.Name, Message: fmt.Sprintf(format, args...)})
		}
		if j, dup := seen[s.Name]; dup {
			add("/name", "the name is already used by /mcp_servers/%d", j)
			continue
		}
		seen[s.Name] = i
		c := mcpadapter.Config{
			Name: s.Name, Transport: s.Transport, Command: s.Command, URL: s.URL, AllowPrivateNetwork: s.AllowPrivateNetwork,
			Allow: s.Tools.Allow, Approval: s.Tools.Approval, DefaultApproval: s.Tools.DefaultApproval,
			TrustAnnotations: s.TrustAnnotations,
			Timeout:          time.Duration(s.TimeoutSecs) * time.Second,
			MaxMessageBytes:  s.MaxMessageBytes, MaxListBytes: s.MaxListBytes,
		}
		if s.MaxRetries != nil {
			c.MaxAttempts = *s.MaxRetries + 1
		}
		c.Env = fromEnv(s.Env, env.Getenv, func(k, v string) { add("/env/"+escape(k), "the environment variable %s is not set", v) })
		c.Headers = fromEnv(s.HeadersEnv, env.Getenv, func(k, v string) { add("/headers_env/"+escape(k), "the environment variable %s is not set", v) })
		if c.Transport == mcpadapter.HTTP {
			if _, err := webhook.CheckURL(c.URL, env.Production, c.AllowPrivateNetwork); err != nil {
				add("/url", "%s", err.Error())
			}
		}
		if err := c.Check(); err != nil {
			add("", "%s", err.Error())
		}
		out = append(out, c)
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return lessPath(problems[i].Path, problems[j].Path) })
		return nil, &Error{Problems: problems}
	}
	return out, nil
}

// fromEnv maps each key to the value of the environment variable it names; missing reports an
// unset or empty one.
func fromEnv(names map[string]string, getenv func(string) string, missing func(key, variable string)) map[string]string {
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]string, len(names))
	for k, variable := range names {
		v := getenv(variable)
		if v == "" {
			missing(k, variable)
			continue
		}
		out[k] = v
	}
	return out
}

func escape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
