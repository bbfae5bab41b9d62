// Package toolsfile loads the tools file (PARLEY_TOOLS): it validates the JSON against the
// shipped JSON Schema (schemas/tools.schema.json, embedded here as a checked copy), then builds
// every tool — webhook, http (http.request), human, client and go (host-approved adapters) —
// with tools.New. Every problem of the file is reported at once, each with its JSON path and
// the tool's name, so one start-up shows everything to fix.
package toolsfile

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"parley/internal/clock"
	"parley/internal/tools"
	"parley/internal/tools/goadapter"
	"parley/internal/tools/httpadapter"
	"parley/internal/tools/webhook"
)

// schemaJSON is a copy of schemas/tools.schema.json (go:embed cannot reach above the package);
// a test keeps the two identical.
//
//go:embed tools.schema.json
var schemaJSON []byte

// Schema returns the tools file's JSON Schema.
func Schema() []byte { return bytes.Clone(schemaJSON) }

const schemaURL = "mem://parley/tools.schema.json"

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource(schemaURL, bytes.NewReader(schemaJSON)); err != nil {
		return nil, fmt.Errorf("add tools file schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("compile tools file schema: %w", err)
	}
	return s, nil
})

// Env is what the host gives the loader.
type Env struct {
	// Production (PARLEY_ENV=production) refuses plain-HTTP webhook URLs.
	Production bool
	// Getenv reads webhook secrets by the variable a tool names; nil uses os.Getenv.
	Getenv func(string) string
	// Credentials resolves http tools' credential_refs; nil refuses tools that name any.
	Credentials httpadapter.CredentialResolver
	// Adapters is the registry go tools name keys of; nil refuses every go tool.
	Adapters *goadapter.Registry
	// Clock stamps webhook timestamps and reads Retry-After dates; nil is the wall clock.
	Clock clock.Clock
	// HTTPClient builds the client of one http or webhook tool from its dial policy; nil uses
	// httpadapter.NewClient. Tests use it to reach httptest servers through the same policy.
	HTTPClient func(httpadapter.DialPolicy) *http.Client
}

// Problem is one thing wrong with the file.
type Problem struct {
	// Path is a JSON pointer into the file ("/tools/2/request/url_template").
	Path string `json:"path"`
	// Tool is the name of the tool the problem is in, when known.
	Tool    string `json:"tool,omitempty"`
	Message string `json:"message"`
}

// Error lists every problem of a tools file.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "tools file"
	}
	fmt.Fprintf(&b, "%s: %d problem(s):", name, len(e.Problems))
	for _, p := range e.Problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		b.WriteString("\n  " + path)
		if p.Tool != "" {
			b.WriteString(" (tool " + strconv.Quote(p.Tool) + ")")
		}
		b.WriteString(": " + p.Message)
	}
	return b.String()
}

// Load reads and builds the tools file at path.
func Load(path string, env Env) ([]*tools.Tool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tools file: %w", err)
	}
	ts, err := Parse(data, env)
	var fe *Error
	if errors.As(err, &fe) {
		fe.File = path
	}
	return ts, err
}

// Parse validates and builds a tools file's contents. On any problem it returns no tools and
// an *Error listing all of them.
func Parse(data []byte, env Env) ([]*tools.Tool, error) {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Clock == nil {
		env.Clock = clock.Real{}
	}
	if env.HTTPClient == nil {
		env.HTTPClient = httpadapter.NewClient
	}
	schema, err := compiled()
	if err != nil {
		return nil, err
	}
	if !json.Valid(data) {
		return nil, &Error{Problems: []Problem{{Path: "", Message: "the file is not valid JSON: " + syntaxError(data)}}}
	}
	doc, err := tools.DecodeJSON(data)
	if err != nil {
		return nil, &Error{Problems: []Problem{{Path: "", Message: "the file is not valid JSON: " + err.Error()}}}
	}
	var raw struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	// A shape error here is reported by the schema below, with a path.
	_ = json.Unmarshal(data, &raw)

	names := toolNames(doc)
	var problems []Problem
	bad := map[int]bool{}
	if err := schema.Validate(doc); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("validate tools file: %w", err)
		}
		for _, p := range tools.Problems(ve) {
			path := p.Path
			i := toolIndex(path)
			if i >= 0 {
				bad[i] = true
			}
			problems = append(problems, Problem{Path: path, Tool: names[i], Message: schemaMessage(doc, path, p.Message)})
		}
	}

	var out []*tools.Tool
	seen := map[string]int{}
	for i, obj := range raw.Tools {
		base := "/tools/" + strconv.Itoa(i)
		if bad[i] {
			continue
		}
		name := names[i]
		if j, dup := seen[name]; dup {
			problems = append(problems, Problem{Path: base + "/name", Tool: name, Message: fmt.Sprintf("the name is already used by /tools/%d", j)})
			continue
		}
		seen[name] = i
		t, ps := build(obj, env)
		for _, p := range ps {
			problems = append(problems, Problem{Path: base + p.Path, Tool: name, Message: p.Message})
		}
		if len(ps) == 0 {
			out = append(out, t)
		}
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return lessPath(problems[i].Path, problems[j].Path) })
		return nil, &Error{Problems: problems}
	}
	return out, nil
}

// schemaMessage rewords two schema messages that read poorly: a propertyNames failure (which
// names the allowed keys) becomes the unknown key it is, and the request's oneOf says which
// keys collide.
func schemaMessage(doc any, path, msg string) string {
	if strings.HasSuffix(path, "/request") && strings.HasPrefix(msg, "valid against schemas at indexes") {
		return "give either url or url_template, not both"
	}
	if !strings.HasPrefix(msg, `value must be one of "name"`) {
		return msg
	}
	i := toolIndex(path)
	parts := strings.Split(path, "/")
	if i < 0 || len(parts) != 4 {
		return msg
	}
	m, _ := doc.(map[string]any)
	arr, _ := m["tools"].([]any)
	tm, _ := arr[i].(map[string]any)
	typ, _ := tm["type"].(string)
	key := strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[3])
	if _, ok := tm[key]; !ok {
		return msg
	}
	allowed := strings.TrimPrefix(msg, "value must be one of ")
	return fmt.Sprintf("unknown key %q for a %s tool (allowed: %s)", key, typ, allowed)
}

// lessPath orders JSON pointers with numeric segments compared as numbers.
func lessPath(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for k := 0; k < len(as) && k < len(bs); k++ {
		if as[k] == bs[k] {
			continue
		}
		ai, aerr := strconv.Atoi(as[k])
		bi, berr := strconv.Atoi(bs[k])
		if aerr == nil && berr == nil {
			return ai < bi
		}
		return as[k] < bs[k]
	}
	return len(as) < len(bs)
}

func syntaxError(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("%s (line %d)", se.Error(), line)
	}
	if err != nil {
		return err.Error()
	}
	return "unexpected data"
}

// toolNames maps a tool's index to its name (empty when it has none); index -1 is "".
func toolNames(doc any) map[int]string {
	out := map[int]string{-1: ""}
	m, _ := doc.(map[string]any)
	arr, _ := m["tools"].([]any)
	for i, t := range arr {
		tm, _ := t.(map[string]any)
		s, _ := tm["name"].(string)
		out[i] = s
	}
	return out
}

// toolIndex returns i of a path under /tools/i, else -1.
func toolIndex(path string) int {
	rest, ok := strings.CutPrefix(path, "/tools/")
	if !ok {
		return -1
	}
	seg, _, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(seg)
	if err != nil {
		return -1
	}
	return i
}

// field decodes one property of a tool object into v; absent leaves v untouched.
func field(obj map[string]json.RawMessage, key string, v any) {
	if raw, ok := obj[key]; ok {
		// The schema has checked the type already.
		_ = json.Unmarshal(raw, v)
	}
}

// build turns one schema-valid tool object into a tool; problems have paths relative to it.
func build(obj map[string]json.RawMessage, env Env) (*tools.Tool, []httpadapter.Problem) {
	var ps []httpadapter.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, httpadapter.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	var (
		name, typ, description, approval, approvers string
		timeoutSecs, maxRetries, maxOutput          int
		retention                                   tools.Retention
	)
	field(obj, "name", &name)
	field(obj, "type", &typ)
	field(obj, "description", &description)
	field(obj, "approval", &approval)
	var approverCount int
	approvers, approverCount = approverSet(obj["approvers"])
	field(obj, "timeout_secs", &timeoutSecs)
	field(obj, "max_retries", &maxRetries)
	field(obj, "max_output_bytes", &maxOutput)
	field(obj, "retention", &retention)

	spec := tools.Spec{
		Name:           name,
		Description:    description,
		Parameters:     obj["parameters"],
		Approval:       tools.Approval(approval),
		Approvers:      tools.Approvers(approvers),
		Retention:      retention,
		Timeout:        time.Duration(timeoutSecs) * time.Second,
		MaxOutputBytes: maxOutput,
		ApproverCount:  approverCount,
	}
	governance(obj, &spec)
	declared := declaredProperties(obj["parameters"])

	switch typ {
	case "webhook":
		spec.Executor = tools.Server
		spec.MaxAttempts = maxRetries + 1
		var (
			rawURL, secretEnv string
			headers           map[string]string
			allowPrivate      bool
		)
		field(obj, "url", &rawURL)
		field(obj, "secret_env", &secretEnv)
		field(obj, "headers", &headers)
		field(obj, "allow_private_network", &allowPrivate)
		if _, err := webhook.CheckURL(rawURL, env.Production, allowPrivate); err != nil {
			add("/url", "%v", err)
		}
		if err := webhook.CheckHeaders(headers); err != nil {
			add("/headers", "%v", err)
		}
		secret, err := webhook.DecodeSecret(env.Getenv(secretEnv))
		if err != nil {
			add("/secret_env", "environment variable %s: %v", secretEnv, err)
		}
		if spec.Timeout == 0 {
			spec.Timeout = webhook.DefaultTimeout
		}
		if len(ps) > 0 {
			return nil, ps
		}
		w, err := webhook.New(webhook.Config{
			Tool: name, URL: rawURL, Headers: headers, Timeout: spec.Timeout, Secret: secret,
			Production: env.Production, AllowPrivateNetwork: allowPrivate, Clock: env.Clock,
			Client: env.HTTPClient(httpadapter.DialPolicy{AllowPrivateNetwork: allowPrivate}),
		})
		if err != nil {
			add("", "%v", err)
			return nil, ps
		}
		spec.Func, spec.DryRun = w.Func(), w.DryRun()

	case "http":
		spec.Executor = tools.Server
		spec.MaxAttempts = maxRetries + 1
		var (
			req  map[string]any
			opts httpadapter.ActionOptions
		)
		if raw, ok := obj["request"]; ok {
			if v, err := tools.DecodeJSON(raw); err == nil {
				req, _ = v.(map[string]any)
			}
		}
		field(obj, "allowed_hosts", &opts.AllowedHosts)
		field(obj, "allow_private_network", &opts.AllowPrivateNetwork)
		field(obj, "allow_body", &opts.AllowBody)
		field(obj, "allow_slash_in_path", &opts.AllowSlashInPath)
		field(obj, "persist_response_body", &opts.PersistResponseBody)
		field(obj, "max_body_bytes", &opts.MaxBodyBytes)
		opts.Credentials, opts.Clock = env.Credentials, env.Clock
		opts.Client = env.HTTPClient(httpadapter.DialPolicyFor(opts))
		a, err := httpadapter.NewAction(req, opts)
		var ve *httpadapter.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				if p.Path == "" && len(opts.AllowedHosts) == 0 {
					add("/allowed_hosts", "%s", p.Message)
					continue
				}
				add("/request"+p.Path, "%s", p.Message)
			}
			return nil, ps
		} else if err != nil {
			add("/request", "%v", err)
			return nil, ps
		}
		for _, n := range a.Request().Placeholders() {
			if !declared[n] {
				add("/request", "placeholder {{ %s }} is not a property of parameters", n)
			}
		}
		if len(ps) > 0 {
			return nil, ps
		}
		spec.Func, spec.DryRun, spec.Precheck = a.Func(), a.DryRun(), a.Precheck

	case "human":
		spec.Executor = tools.Human
		spec.ResponseSchema = obj["response_schema"]

	case "client":
		spec.Executor = tools.Client
		spec.ResultSchema = obj["result_schema"]
		field(obj, "run_without_asking", &spec.RunWithoutAsking)

	case "go":
		spec.Executor = tools.Server
		spec.MaxAttempts = maxRetries + 1
		var key string
		field(obj, "adapter", &key)
		e, err := env.Adapters.Lookup(key)
		if err != nil {
			add("/adapter", "%v", err)
			return nil, ps
		}
		if spec.Description == "" {
			spec.Description = e.Description
		}
		if spec.Description == "" {
			add("/description", "a description is required (the adapter %q has none to lend)", key)
			return nil, ps
		}
		spec.Func, spec.Precheck = goadapter.ToolFunc(env.Adapters, key), goadapter.Precheck(env.Adapters, key)

	default:
		add("/type", "unknown tool type %q", typ)
		return nil, ps
	}

	t, err := tools.New(spec)
	if err != nil {
		var de *tools.DefinitionError
		if errors.As(err, &de) {
			add(de.Field, "%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("tool %q: ", name)))
		} else {
			add("", "%v", err)
		}
		return nil, ps
	}
	return t, nil
}

// declaredProperties lists parameters.properties' names.
func declaredProperties(raw json.RawMessage) map[string]bool {
	var p struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(raw, &p)
	out := map[string]bool{}
	for k := range p.Properties {
		out[k] = true
	}
	return out
}
