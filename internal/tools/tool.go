// Package tools is Parley's tool model: a tool's declaration (executor, approval gate, schema,
// retention, timeout), the registry, argument validation, the result envelope and its error-kind
// vocabulary, output bounds, dry runs and the built-in tools.
package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"parley/internal/fault"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Executor says who produces a call's result.
type Executor string

// Executors.
const (
	Server   Executor = "server"   // Go code (a callback or an adapter) runs it
	Human    Executor = "human"    // a person's answer to a form is the result
	Client   Executor = "client"   // the owner's browser runs it through a hook
	Provider Executor = "provider" // the model provider runs it in-stream (hosted web search)
)

// Approval says whether a call waits at a human gate before it runs.
type Approval string

// Approval policies.
const (
	Auto             Approval = "auto"
	RequiresApproval Approval = "requires_approval"
)

// Approvers says who may decide a gated call.
type Approvers string

// Approver policies. Who may decide is agent.DecideRight's to say; in short:
const (
	// ByOwner: the conversation's owner. A reviewer may not; an admin may, in someone else's
	// conversation, as an override.
	ByOwner Approvers = "owner"
	// ByReviewer: a reviewer or an admin who is not the owner (no self-approval, admins
	// included).
	ByReviewer Approvers = "reviewer"
)

// PendingKind is what the page switches on for a suspended call.
type PendingKind string

// Pending kinds.
const (
	PendingApproval    PendingKind = "approval"
	PendingElicitation PendingKind = "elicitation"
	PendingClientExec  PendingKind = "client_exec"
)

// Retention controls how long a tool's results stay in the model's context. The log always keeps
// them; compaction only replaces old ones in what is sent to the model.
type Retention struct {
	// MaxAgeTurns evicts a result once this many user turns have passed since it; 0 means no limit.
	MaxAgeTurns int `json:"max_age_turns,omitempty"`
	// MaxCount keeps only the newest N results of this tool; 0 means no limit.
	MaxCount int `json:"max_count,omitempty"`
	// NeverEvict keeps every result whatever the other settings say.
	NeverEvict bool `json:"never_evict,omitempty"`
}

// DefaultMaxOutputBytes bounds the model-facing result of a call.
const DefaultMaxOutputBytes = 16000

// Call is what a callback knows about the call it runs.
type Call struct {
	ConversationID string
	// ToolCallID is the call's id within its conversation: a call re-dispatched after a crash
	// carries the same id. It is unique only in its conversation (models reuse ids such as
	// "call_0" in every conversation); Key is unique in the whole store.
	ToolCallID string
	UserID     string
	Attempt    int
	DryRun     bool
	Logger     *slog.Logger
	// Progress reports intermediate output of a streaming tool; never nil when run by Execute.
	Progress func(message string)
	// Ask puts a question to the conversation's owner while the call runs (an MCP server's
	// elicitation) and waits for the answer; nil where nobody can be asked (see ask.go).
	Ask AskFunc
	// Resumed is set when this run continues from a question answered after the run that
	// asked it was lost (Question.Resume); nil otherwise.
	Resumed *Resumed
}

// Key is the call's identity in the whole store, its idempotency key: the same on every
// attempt, after restarts and from any process, and different for two calls even when their
// conversations' models gave them the same id. It is derived from the conversation id and the
// tool_call_id (each length-prefixed, so no pair of ids runs into another): "pc_" and 32 hex
// digits of their SHA-256.
func (c Call) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(c.ConversationID), c.ConversationID, len(c.ToolCallID), c.ToolCallID)
	return "pc_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// Func runs a server tool. It returns the result (any JSON-encodable value) or an error: a
// *fault.Error is a tool error the model reads; anything else is an internal error it never sees.
type Func func(ctx context.Context, call Call, args map[string]any) (any, error)

// Plan is a dry run's description of what a call would do. (How the log keeps it and how the
// API shows it are theirs: no JSON here.)
type Plan struct {
	Summary string
	Details map[string]any
}

// DryRunFunc describes what a call would do without doing it.
type DryRunFunc func(ctx context.Context, call Call, args map[string]any) (Plan, error)

// PrecheckFunc re-validates a server call's schema-valid arguments against what the tool will do
// with them (for an http.request tool: the host policy and the request expanded with the
// arguments) without doing it. It returns nil to let the call run; a *fault.Error refuses it with an
// error the model reads; any other error is internal.
type PrecheckFunc func(ctx context.Context, args map[string]any) error

// Spec declares a tool. New checks it and compiles its schemas.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments, exported to providers verbatim.
	Parameters json.RawMessage
	Executor   Executor
	Approval   Approval
	Approvers  Approvers
	Streaming  bool
	Retention  Retention
	// Timeout bounds each suspension of a call (and the run of a server call); 0 uses the app's default.
	Timeout time.Duration
	// MaxAttempts bounds tries of a retryable failure; 0 means 1 (no retry).
	MaxAttempts int
	// ResponseSchema is a human tool's form schema. When empty, the form comes from the call's
	// arguments (`message` and `schema`, as ask_user does).
	ResponseSchema json.RawMessage
	// ResultSchema validates a client tool's result, which is user-controllable.
	ResultSchema json.RawMessage
	// RunWithoutAsking lets a client tool run in the owner's page as soon as it is asked to. By
	// default the page asks the person first ("Allow geolocation to run in this browser?"), and
	// their "no" is an error result the model reads: a browser permission granted once is not
	// consent to every later call.
	RunWithoutAsking bool
	// Native is a provider tool's own definition (e.g. {"type":"web_search_20250305",…}),
	// sent to the provider in place of a function definition.
	Native json.RawMessage
	// NativeFormat is the export format Native belongs to: "anthropic" (the default when Native
	// is set) or "openai". A provider tool is exported only in its own format, because a hosted
	// tool of one provider means nothing to another (see Registry.OpenAITools).
	NativeFormat string
	// Func runs a server tool (and a gated server tool after approval).
	Func Func
	// DryRun describes a call; nil uses the default plan.
	DryRun DryRunFunc
	// Precheck re-validates a server call's arguments before an attempt is recorded (see
	// Tool.Precheck); nil means schema validation is the whole check.
	Precheck PrecheckFunc
	// MaxOutputBytes bounds the model-facing envelope; 0 uses DefaultMaxOutputBytes.
	MaxOutputBytes int
	// ForbidEdits: an approver approves or denies a call as the model made it, never with
	// other arguments (the tools file's "edits": "forbidden").
	ForbidEdits bool

	// Governance (rules.go, governance.go).

	// ApproverCount is how many distinct approvers of Approvers a gated call needs (M-of-N);
	// 0 and 1 mean one. More than one needs reviewer approvers: the owner never counts.
	ApproverCount int
	// Rules decide a call before it is dispatched, first match wins (allow, deny, ask); none
	// matching leaves the tool's Approval. New compiles the ones not compiled yet.
	Rules []Rule
	// RulesShadow records what Rules would decide without acting on it.
	RulesShadow bool
	// ApprovalTimeout bounds how long an approval may wait; 0 uses Timeout (or the app's
	// default). Timeout then bounds only the run and the other suspensions.
	ApprovalTimeout time.Duration
	// OnApprovalTimeout is what happens when an approval waits past its timeout: deny (the
	// default: the call expires) or escalate (admins may decide it, with a new deadline).
	OnApprovalTimeout TimeoutAction
}

// Tool is a checked, compiled tool declaration. It is immutable and safe for concurrent use.
type Tool struct {
	spec     Spec
	params   *jsonschema.Schema
	result   *jsonschema.Schema
	response *jsonschema.Schema
}

// DefinitionError reports a declaration that New refuses, naming the tool and the rule.
type DefinitionError struct {
	Tool string
	Rule string
	// Field is the declaration key the rule is about, as a JSON pointer into a tools-file entry
	// ("/parameters", "/approval" …); empty when the rule is about the tool as a whole.
	Field string
	Err   error
}

// Error implements error: `tool "name": rule[: cause]`.
func (e *DefinitionError) Error() string {
	msg := fmt.Sprintf("tool %q: %s", e.Tool, e.Rule)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause (a schema compile error, say), nil for a plain rule.
func (e *DefinitionError) Unwrap() error { return e.Err }

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// New checks a declaration and compiles its schemas. It refuses an invalid name, executor,
// approval or approvers, a gated human or provider tool, a server tool without a callback, and a
// schema that does not compile.
func New(s Spec) (*Tool, error) {
	bad := func(rule string, err error) (*Tool, error) {
		return nil, &DefinitionError{Tool: s.Name, Rule: rule, Err: err}
	}
	badAt := func(field, rule string, err error) (*Tool, error) {
		return nil, &DefinitionError{Tool: s.Name, Rule: rule, Field: field, Err: err}
	}
	if !nameRE.MatchString(s.Name) {
		return bad("name must be 1-64 letters, digits, '_' or '-'", nil)
	}
	if s.Approval == "" {
		s.Approval = Auto
	}
	if s.Approvers == "" {
		s.Approvers = ByOwner
	}
	switch s.Executor {
	case Server, Human, Client, Provider:
	default:
		return bad(fmt.Sprintf("executor %q is not one of server, human, client, provider", s.Executor), nil)
	}
	switch s.Approval {
	case Auto, RequiresApproval:
	default:
		return badAt("/approval", fmt.Sprintf("approval %q is not one of auto, requires_approval", s.Approval), nil)
	}
	switch s.Approvers {
	case ByOwner, ByReviewer:
	default:
		return bad(fmt.Sprintf("approvers %q is not one of owner, reviewer", s.Approvers), nil)
	}
	if s.Approval == RequiresApproval && (s.Executor == Human || s.Executor == Provider) {
		return badAt("/approval", fmt.Sprintf("a %s tool cannot require approval (only server and client tools can be gated)", s.Executor), nil)
	}
	if s.Executor == Server && s.Func == nil {
		return bad("a server tool needs a callback", nil)
	}
	if s.Executor != Server && s.Func != nil {
		return bad(fmt.Sprintf("a %s tool must not have a callback", s.Executor), nil)
	}
	if s.Executor != Server && s.Precheck != nil {
		return bad(fmt.Sprintf("a %s tool must not have a precheck (only server calls run here)", s.Executor), nil)
	}
	if s.Timeout < 0 || s.MaxAttempts < 0 || s.MaxOutputBytes < 0 {
		return bad("timeout, max attempts and max output bytes must not be negative", nil)
	}
	if s.MaxOutputBytes != 0 && s.MaxOutputBytes < MinOutputBytes {
		return bad(fmt.Sprintf("max output bytes must be at least %d", MinOutputBytes), nil)
	}
	if r := s.Retention; r.MaxAgeTurns < 0 || r.MaxCount < 0 {
		return bad("retention limits must not be negative", nil)
	}
	if err := checkGovernance(&s); err != nil {
		return nil, err
	}
	// Keep private copies: a Tool is immutable even if the caller reuses its buffers.
	s.Parameters = clone(s.Parameters)
	s.ResponseSchema, s.ResultSchema, s.Native = clone(s.ResponseSchema), clone(s.ResultSchema), clone(s.Native)
	if len(bytes.TrimSpace(s.Parameters)) == 0 {
		s.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	t := &Tool{spec: s}
	var err error
	if t.params, err = compileSchema(s.Name, "parameters", s.Parameters); err != nil {
		return badAt("/parameters", "parameter schema does not compile", err)
	}
	// Arguments are always a JSON object (both providers require it), so a schema that
	// declares another type could never accept a call.
	var top map[string]any
	_ = json.Unmarshal(s.Parameters, &top)
	if typ, ok := top["type"]; ok && typ != "object" {
		return badAt("/parameters", fmt.Sprintf(`parameter schema must have "type": "object", not %v`, typ), nil)
	}
	if len(s.ResultSchema) > 0 {
		if s.Executor != Client {
			return bad("only a client tool has a result schema", nil)
		}
		if t.result, err = compileSchema(s.Name, "result", s.ResultSchema); err != nil {
			return badAt("/result_schema", "result schema does not compile", err)
		}
	}
	if len(s.ResponseSchema) > 0 {
		if s.Executor != Human {
			return bad("only a human tool has a response schema", nil)
		}
		if t.response, err = compileSchema(s.Name, "response", s.ResponseSchema); err != nil {
			return badAt("/response_schema", "response schema does not compile", err)
		}
	}
	if len(s.Native) > 0 {
		if s.Executor != Provider {
			return bad("only a provider tool has a native definition", nil)
		}
		var native map[string]any
		if err := json.Unmarshal(s.Native, &native); err != nil || native == nil {
			return bad("native definition must be a JSON object", err)
		}
		if typ, _ := native["type"].(string); typ == "" {
			return bad(`native definition needs a "type"`, nil)
		}
		if n, ok := native["name"]; ok && n != s.Name {
			return bad(fmt.Sprintf("native definition names %v, not the tool's name", n), nil)
		}
		if t.spec.NativeFormat == "" {
			t.spec.NativeFormat = FormatAnthropic
		}
		if t.spec.NativeFormat != FormatAnthropic && t.spec.NativeFormat != FormatOpenAI {
			return bad(fmt.Sprintf("native format %q is not one of anthropic, openai", t.spec.NativeFormat), nil)
		}
	} else if s.Executor == Provider {
		return bad("a provider tool needs its native definition (it is exported to the provider as is)", nil)
	} else if s.NativeFormat != "" {
		return bad("only a provider tool has a native format", nil)
	}
	return t, nil
}

func clone(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage{}, b...)
}

// compileSchema compiles a JSON Schema (draft 2020-12 unless it says otherwise) from memory.
func compileSchema(tool, part string, raw json.RawMessage) (*jsonschema.Schema, error) {
	var probe any
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	if _, ok := probe.(map[string]any); !ok {
		return nil, errors.New("schema must be a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	// A schema is self-contained: no $ref or $schema may make the compiler read a file or the
	// network (an elicitation schema comes from the model's arguments).
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("schema refers to %q: only self-contained schemas are allowed", u)
	}
	url := "mem://tools/" + tool + "/" + part + ".json"
	if err := c.AddResource(url, bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// CompileSchema compiles a schema that is not part of a declaration (an elicitation form
// supplied in a call's arguments). name only labels errors.
//
// Compiled schemas are kept (schemaCache): a form is compiled when the call suspends and again
// when each answer is checked, and a model asking with the same tool tends to send the same
// form, so compiling each time cost more than the rest of a resolve's work.
func CompileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	key := name + "\x00" + string(raw)
	if s := compiledSchemas.get(key); s != nil {
		return s, nil
	}
	s, err := compileSchema(name, "schema", raw)
	if err != nil {
		return nil, err
	}
	if len(key) <= maxCachedSchemaBytes {
		compiledSchemas.put(key, s)
	}
	return s, nil
}

// schemaCache's bounds: at most maxCachedSchemas schemas of at most maxCachedSchemaBytes each
// (label included); a larger one is compiled every time.
const (
	maxCachedSchemas     = 256
	maxCachedSchemaBytes = 16 << 10
)

var compiledSchemas = schemaCache{m: map[string]*jsonschema.Schema{}}

// schemaCache holds compiled schemas by label and text. A compiled schema is only read after
// compiling, so one may be shared by any number of goroutines. Overflow policy: when full, an
// arbitrary entry makes room for the new one (the map's iteration order picks it).
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*jsonschema.Schema
}

func (c *schemaCache) get(key string) *jsonschema.Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *schemaCache) put(key string, s *jsonschema.Schema) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedSchemas {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = s
}

// Name is the tool's unique name, the one the model calls.
func (t *Tool) Name() string { return t.spec.Name }

// Description tells the model what the tool does.
func (t *Tool) Description() string { return t.spec.Description }

// Parameters is the argument JSON Schema exactly as declared (the bytes sent to providers).
// The caller must not modify it.
func (t *Tool) Parameters() json.RawMessage { return t.spec.Parameters }

// Executor says who produces the call's result.
func (t *Tool) Executor() Executor { return t.spec.Executor }

// Approval is the tool's gate policy (auto unless declared).
func (t *Tool) Approval() Approval { return t.spec.Approval }

// Approvers says who may decide a gated call (owner unless declared).
func (t *Tool) Approvers() Approvers { return t.spec.Approvers }

// EditsForbidden reports whether approvers may not change a call's arguments.
func (t *Tool) EditsForbidden() bool { return t.spec.ForbidEdits }

// Streaming reports whether the tool reports progress while it runs.
func (t *Tool) Streaming() bool { return t.spec.Streaming }

// Retention is how long the tool's results stay in the model's context.
func (t *Tool) Retention() Retention { return t.spec.Retention }

// Timeout bounds each suspension and each server run of a call; 0 means the app's default.
func (t *Tool) Timeout() time.Duration { return t.spec.Timeout }

// Native is a provider tool's own definition, nil for other tools.
func (t *Tool) Native() json.RawMessage { return t.spec.Native }

// NativeFormat is the export format of a provider tool's native definition ("anthropic" or
// "openai"), empty for other tools.
func (t *Tool) NativeFormat() string { return t.spec.NativeFormat }

// ResponseSchema is a human tool's declared form schema, nil when the form comes from the
// call's arguments.
func (t *Tool) ResponseSchema() json.RawMessage { return t.spec.ResponseSchema }

// MaxOutputBytes bounds the tool's model-facing envelope (DefaultMaxOutputBytes unless set).
func (t *Tool) MaxOutputBytes() int {
	if t.spec.MaxOutputBytes <= 0 {
		return DefaultMaxOutputBytes
	}
	return t.spec.MaxOutputBytes
}

// HasDryRun reports whether the tool describes its calls with a plan of its own (a
// side-effecting tool) rather than the default plan.
func (t *Tool) HasDryRun() bool { return t.spec.DryRun != nil }

// Gated reports whether calls wait for approval before they run.
func (t *Tool) Gated() bool { return t.spec.Approval == RequiresApproval }

// MaxAttempts is how many times a retryable failure is tried in all (at least 1).
func (t *Tool) MaxAttempts() int {
	if t.spec.MaxAttempts < 1 {
		return 1
	}
	return t.spec.MaxAttempts
}

// ResultSchema is a client tool's result schema, nil when it has none.
func (t *Tool) ResultSchema() json.RawMessage { return t.spec.ResultSchema }

// AsksBeforeRunning reports whether the owner's page asks the person before it runs this
// client tool (Spec.RunWithoutAsking unset).
func (t *Tool) AsksBeforeRunning() bool { return !t.spec.RunWithoutAsking }

// PendingKind is the kind of the call's current suspension: approval while gated and not yet
// approved, else elicitation for human tools and client_exec for client tools. It is empty for
// a phase that does not suspend (an approved or ungated server call, a provider call).
func (t *Tool) PendingKind(approved bool) PendingKind {
	if t.Gated() && !approved {
		return PendingApproval
	}
	switch t.spec.Executor {
	case Human:
		return PendingElicitation
	case Client:
		return PendingClientExec
	}
	return ""
}

// ValidateArgs decodes the model's arguments and validates them against the parameter schema.
// A failure is an invalid_args tool error listing every problem with its JSON path.
func (t *Tool) ValidateArgs(raw json.RawMessage) (map[string]any, *fault.Error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	v, err := DecodeJSON(raw)
	if err != nil {
		return nil, fault.InvalidAt("arguments are not valid JSON: "+err.Error(), "", err.Error())
	}
	args, ok := v.(map[string]any)
	if !ok {
		return nil, fault.InvalidAt("arguments must be a JSON object", "", "expected an object")
	}
	if e := ValidateValue(t.params, args, "arguments"); e != nil {
		return nil, e
	}
	return args, nil
}

// ValidateValue validates v (decoded from JSON) against s and turns a failure into an
// invalid_args error whose details list every problem with its instance path.
func ValidateValue(s *jsonschema.Schema, v any, what string) (e *fault.Error) {
	defer func() {
		// The validator panics on values that are not JSON (a NaN, a Go struct): that is a
		// bad value, not a crash.
		if r := recover(); r != nil {
			e = fault.InvalidAt(fmt.Sprintf("%s could not be validated: %v", what, r), "", fmt.Sprint(r))
		}
	}()
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fault.InvalidAt(what+" could not be validated: "+err.Error(), "", err.Error())
	}
	problems := Problems(ve)
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		path := p.Path
		if path == "" {
			path = "/"
		}
		msgs = append(msgs, path+": "+p.Message)
	}
	return fault.Invalid(what+" do not match the schema: "+strings.Join(msgs, "; "), problems...)
}

// Problems flattens a validation error into its leaves, each with its JSON pointer.
func Problems(ve *jsonschema.ValidationError) []fault.Problem {
	var out []fault.Problem
	seen := map[string]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			key := e.InstanceLocation + "\x00" + e.Message
			if !seen[key] {
				seen[key] = true
				out = append(out, fault.Problem{Path: e.InstanceLocation, Message: e.Message})
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// normalizeNumbers turns json.Number into int64 when integral, else float64, so callbacks see
// plain Go numbers and jsonschema sees exact integers. A number beyond float64's range is an
// error: it could not be encoded again, and the validator cannot compare it.
func normalizeNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %.40s is out of range", x.String())
		}
		return f, nil
	case map[string]any:
		for k, e := range x {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
	case []any:
		for i, e := range x {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
	}
	return v, nil
}

// DecodeJSON decodes raw, which must hold exactly one JSON value, into plain Go values
// (objects, arrays, strings, float64/int64, bools).
func DecodeJSON(raw []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	// Decoder.More misses a stray '}' or ']', so look at what is left directly.
	if rest := bytes.TrimSpace(raw[dec.InputOffset():]); len(rest) > 0 {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return normalizeNumbers(v)
}

// ValidateResult validates a client tool's result, which the browser controls and is never
// trusted for a privileged decision.
func (t *Tool) ValidateResult(v any) *fault.Error {
	if t.result == nil {
		return nil
	}
	return ValidateValue(t.result, v, "result")
}

// OutcomeStatus is one of the three outcomes of running a tool: a result, a tool error the
// model reads, or an internal error it never sees.
type OutcomeStatus string

// Outcome statuses.
const (
	OK        OutcomeStatus = "ok"         // a result the model reads
	ToolError OutcomeStatus = "tool_error" // an error the model reads
	Internal  OutcomeStatus = "internal"   // logged with a reference; the model sees only the reference
)

// Outcome is the result of running a tool once.
type Outcome struct {
	Status OutcomeStatus
	Result any          // set when Status is OK
	Err    *fault.Error // set otherwise; for Internal it carries only kind internal and the reference
	// Ref is the reference id of an internal error, logged beside the real cause.
	Ref string
	// Cause is the internal error itself, for the log only; never shown to the model or the page.
	Cause error
}

// Retryable reports whether the loop may try the call again.
func (o Outcome) Retryable() bool { return o.Err != nil && o.Err.Retryable }

// Envelope renders the model-facing JSON, bounded to max bytes (0: the default).
func (o Outcome) Envelope(max int) json.RawMessage {
	var b json.RawMessage
	switch {
	case o.Status == OK:
		b = OKEnvelope(o.Result)
	case o.Err == nil:
		b = ErrorEnvelope(fault.New(fault.KindInternal, "internal error", nil))
	default:
		b = ErrorEnvelope(o.Err)
	}
	return BoundEnvelope(b, max)
}

// InternalOutcome wraps an internal error: the reference is logged with the cause, and the
// model and the page get only kind internal and the reference.
func InternalOutcome(logger *slog.Logger, tool string, cause error) Outcome {
	if logger == nil {
		logger = slog.Default()
	}
	e := fault.Internal(logger.With("tool", tool), "tool internal error", cause)
	ref, _ := e.Details["ref"].(string)
	return Outcome{Status: Internal, Err: e, Ref: ref, Cause: cause}
}

// Execute runs a server tool's callback with validated args. A panic is an internal error, not
// a crash; a *fault.Error is a tool error; any other error is internal. The context's deadline (the
// tool's timeout, set by the caller) turns into a retryable timeout tool error.
func (t *Tool) Execute(ctx context.Context, call Call, args map[string]any) (out Outcome) {
	if t.spec.Func == nil {
		return Outcome{Status: ToolError, Err: fault.Errorf(fault.KindUnknownTool, "tool %q is not run by the server", t.spec.Name)}
	}
	if call.Progress == nil {
		call.Progress = func(string) {}
	}
	if call.Logger == nil {
		call.Logger = slog.Default()
	}
	defer func() {
		if r := recover(); r != nil {
			out = InternalOutcome(call.Logger, t.spec.Name, fmt.Errorf("panic in tool %s: %v\n%s", t.spec.Name, r, debug.Stack()))
		}
	}()
	res, err := t.spec.Func(ctx, call, args)
	return t.outcome(ctx, call, res, err)
}

func (t *Tool) outcome(ctx context.Context, call Call, res any, err error) Outcome {
	if err == nil {
		// A result that cannot be encoded would reach the model as an empty internal error
		// with no reference; make it a proper internal outcome, logged with its cause.
		if _, merr := json.Marshal(res); merr != nil {
			return InternalOutcome(call.Logger, t.spec.Name, fmt.Errorf("encode result of %s: %w", t.spec.Name, merr))
		}
		return Outcome{Status: OK, Result: res}
	}
	var te *fault.Error
	if errors.As(err, &te) && te != nil {
		if te.Kind == fault.KindInternal {
			// A callback's "internal" tool error would show its message to the model;
			// internal errors are only ever shown as a reference.
			return InternalOutcome(call.Logger, t.spec.Name, te)
		}
		return Outcome{Status: ToolError, Err: te}
	}
	// Once the deadline (the tool's timeout) has passed, any other error is a consequence of
	// it: an I/O error need not wrap context.DeadlineExceeded.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e := fault.Errorf(fault.KindTimeout, "tool %s did not finish in time", t.spec.Name)
		e.Retryable = true
		return Outcome{Status: ToolError, Err: e}
	}
	return InternalOutcome(call.Logger, t.spec.Name, err)
}

// HasPrecheck reports whether the tool re-validates calls beyond its schema (Precheck).
func (t *Tool) HasPrecheck() bool { return t.spec.Precheck != nil }

// Precheck re-validates a server call's arguments, already checked by ValidateArgs, against
// the tool's own policy, without side effects. The loop calls it before it records an attempt
// (and so before every retry): a non-nil result is the call's tool error and no attempt is
// made. It is nil for a tool without a precheck. A panic or an error that is not a *fault.Error is an
// internal error: logged with a reference, and the returned error carries only the reference.
func (t *Tool) Precheck(ctx context.Context, args map[string]any) (e *fault.Error) {
	if t.spec.Precheck == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			e = InternalOutcome(nil, t.spec.Name, fmt.Errorf("panic in precheck of %s: %v\n%s", t.spec.Name, r, debug.Stack())).Err
		}
	}()
	err := t.spec.Precheck(ctx, args)
	if err == nil {
		return nil
	}
	var te *fault.Error
	if errors.As(err, &te) && te != nil && te.Kind != fault.KindInternal {
		return te
	}
	return InternalOutcome(nil, t.spec.Name, fmt.Errorf("precheck of %s: %w", t.spec.Name, err)).Err
}

// DryRun describes what the call would do, without side effects. Tools without a DryRun get the
// default plan: the tool's name, executor and arguments.
func (t *Tool) DryRun(ctx context.Context, call Call, args map[string]any) (plan Plan, err error) {
	call.DryRun = true
	if call.Progress == nil {
		call.Progress = func(string) {}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in dry run of %s: %v", t.spec.Name, r)
		}
	}()
	if t.spec.DryRun != nil {
		return t.spec.DryRun(ctx, call, args)
	}
	return DefaultPlan(t, args), nil
}

// DefaultPlan is the plan of a tool with no DryRun of its own.
func DefaultPlan(t *Tool, args map[string]any) Plan {
	verb := map[Executor]string{
		Server:   "run %s on the server",
		Human:    "ask you a question (%s)",
		Client:   "run %s in your browser",
		Provider: "let the model provider run %s",
	}[t.spec.Executor]
	return Plan{Summary: "Would " + fmt.Sprintf(verb, t.spec.Name), Details: map[string]any{"tool": t.spec.Name, "executor": string(t.spec.Executor), "arguments": args}}
}

// Prompt is what a human call asks: a message and the form's JSON Schema. (How the log keeps it
// and how the API shows it are theirs: no JSON here.)
type Prompt struct {
	Message string
	Schema  json.RawMessage
	// URL is set for a question answered on another site (an MCP server's URL-mode
	// elicitation): the page shows the link, and the person says when they are done.
	URL string
}

// Elicitation returns the question a human call asks. A tool with a response schema asks for
// it, with the arguments' "message" (or the description) as the question; otherwise the call's
// arguments carry "message" and "schema" (ask_user), and the schema must stay within the
// restricted elicitation subset.
func (t *Tool) Elicitation(args map[string]any) (Prompt, *fault.Error) {
	if t.spec.Executor != Human {
		return Prompt{}, fault.Errorf(fault.KindInvalidArgs, "tool %s does not ask questions", t.spec.Name)
	}
	msg, _ := args["message"].(string)
	if msg == "" {
		msg, _ = args["question"].(string)
	}
	if len(t.spec.ResponseSchema) > 0 {
		if msg == "" {
			msg = t.spec.Description
		}
		return Prompt{Message: msg, Schema: t.spec.ResponseSchema}, nil
	}
	raw, err := json.Marshal(args["schema"])
	if err != nil || args["schema"] == nil {
		return Prompt{}, fault.New(fault.KindInvalidArgs, "a question needs a form schema in \"schema\"", nil)
	}
	if e := CheckElicitationSchema(raw); e != nil {
		return Prompt{}, e
	}
	return Prompt{Message: msg, Schema: raw}, nil
}

// ValidateAnswer validates an elicitation answer against the prompt's schema.
func (t *Tool) ValidateAnswer(p Prompt, content any) *fault.Error {
	s := t.response
	if s == nil || !bytes.Equal(p.Schema, t.spec.ResponseSchema) {
		var err error
		if s, err = CompileSchema(t.spec.Name, p.Schema); err != nil {
			return fault.Errorf(fault.KindInvalidArgs, "the form's schema does not compile: %v", err)
		}
	}
	return ValidateValue(s, content, "answers")
}
