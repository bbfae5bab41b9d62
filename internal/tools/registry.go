package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Export formats, as named by llm.Provider.ToolFormat.
const (
	FormatOpenAI    = "openai"    // OpenAI Chat Completions "tools"
	FormatAnthropic = "anthropic" // Anthropic Messages "tools"
)

// Registry holds the tools a conversation may call, by unique name, in a fixed order: the static
// tools as added (the built-ins, then the tools file's), then each dynamic source's (an MCP
// server's) in the order the sources were first set, each in the source's own order. It is built
// at start-up; afterwards only a dynamic source (SetSource) changes it, replacing its own tools
// as a whole. Every method is safe for concurrent use.
//
// With a definition budget (SetDefinitionBudget) the model is offered the tools that fit it, in
// that order (Offered); the rest are left out of every model call, logged once per change.
type Registry struct {
	mu          sync.RWMutex
	byName      map[string]*Tool    // guarded by mu
	static      []*Tool             // guarded by mu: Add's tools, in order
	sources     map[string][]string // guarded by mu: a dynamic source's tool names
	sourceOrder []string            // guarded by mu: the sources, in the order first set
	order       []*Tool             // guarded by mu: static, then each source's in sourceOrder
	// exported holds each format's tool definitions as last built (every model call sends
	// them); guarded by mu, emptied whenever the tools change.
	exported map[string][]json.RawMessage

	budget  int          // tokens of definitions offered per model call; 0: no budget
	log     *slog.Logger // says what the budget leaves out
	offer   *offer       // guarded by mu: what the budget keeps; nil when the tools changed since
	omitLog []string     // guarded by mu: what was last logged as left out
}

// offer is what a definition budget keeps of the tools.
type offer struct {
	kept    []*Tool
	omitted []string // names, in the registry's order
	tokens  int      // estimated tokens of the kept definitions
}

// NewRegistry builds a registry, refusing a duplicate name.
func NewRegistry(ts ...*Tool) (*Registry, error) {
	r := &Registry{byName: map[string]*Tool{}}
	for _, t := range ts {
		if err := r.Add(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// SetDefinitionBudget bounds the tool definitions offered with each model call, across every
// source, to about tokens estimated tokens (DefinitionTokens); 0 removes the bound. Tools are
// kept in the registry's order while they fit (a tool too large for what is left is left out,
// and a later smaller one may still fit); log hears, once per change of the tools, which were
// left out. Call it while building the registry, before it is shared.
func (r *Registry) SetDefinitionBudget(tokens int, log *slog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budget, r.log = max(tokens, 0), log
	r.changedLocked()
}

// Add registers t; a second tool of the same name is refused. Add is for building the registry
// before it is shared.
func (r *Registry) Add(t *Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.addLocked(t); err != nil {
		return err
	}
	r.static = append(r.static, t)
	r.reorderLocked()
	return nil
}

func (r *Registry) addLocked(t *Tool) error {
	if t == nil {
		return fmt.Errorf("register tool: nil tool")
	}
	if r.byName == nil {
		r.byName = map[string]*Tool{}
	}
	if _, dup := r.byName[t.Name()]; dup {
		return &DefinitionError{Tool: t.Name(), Rule: "duplicate name in registry"}
	}
	r.byName[t.Name()] = t
	return nil
}

// reorderLocked rebuilds order from the static tools and the sources', and marks what was
// derived from it stale.
func (r *Registry) reorderLocked() {
	r.order = append(r.order[:0:0], r.static...)
	for _, src := range r.sourceOrder {
		for _, name := range r.sources[src] {
			r.order = append(r.order, r.byName[name])
		}
	}
	r.changedLocked()
}

func (r *Registry) changedLocked() {
	clear(r.exported)
	r.offer = nil
}

// SetSource replaces the tools of a dynamic source (an MCP server's, named by the server) with
// ts: the source's previous tools leave the registry, ts join it in the source's place (after
// the static tools and the sources set before it; a source set with no tools holds its place).
// A tool whose name another source or a static tool already has is refused (its error is
// returned, joined with the others); the rest are added. Calls already holding a replaced *Tool
// keep it.
func (r *Registry) SetSource(source string, ts []*Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sources == nil {
		r.sources = map[string][]string{}
	}
	old, known := r.sources[source]
	if !known {
		r.sourceOrder = append(r.sourceOrder, source)
	}
	for _, name := range old {
		delete(r.byName, name)
	}
	var errs []error
	names := []string{}
	for _, t := range ts {
		if err := r.addLocked(t); err != nil {
			errs = append(errs, err)
			continue
		}
		names = append(names, t.Name())
	}
	r.sources[source] = names
	r.reorderLocked()
	if len(errs) > 0 {
		return fmt.Errorf("tools of %s: %w", source, joinErrors(errs))
	}
	return nil
}

// definitionOverhead is the bytes a definition takes beside its name, description and
// parameters (the format's keys and punctuation), rounded up.
const definitionOverhead = 64

// DefinitionTokens is a tool's definition in the budget's estimate (about 4 bytes a token, as
// the agent's context budget counts): its name, description and parameters, or its provider's
// native definition.
func DefinitionTokens(t *Tool) int {
	n := len(t.Native())
	if t.Executor() != Provider {
		n = len(t.Name()) + len(t.Description()) + len(t.Parameters()) + definitionOverhead
	}
	return n/4 + 1
}

// offerLocked is what the budget keeps, computed once per change of the tools; the caller
// holds mu for writing.
func (r *Registry) offerLocked() *offer {
	if r.offer != nil {
		return r.offer
	}
	o := &offer{}
	for _, t := range r.order {
		n := DefinitionTokens(t)
		if r.budget > 0 && o.tokens+n > r.budget {
			o.omitted = append(o.omitted, t.Name())
			continue
		}
		o.kept = append(o.kept, t)
		o.tokens += n
	}
	r.offer = o
	if !slices.Equal(o.omitted, r.omitLog) && r.log != nil {
		if len(o.omitted) > 0 {
			r.log.Warn("tool definitions over the budget are left out of every model call",
				"budget_tokens", r.budget, "offered_tokens", o.tokens, "offered", len(o.kept), "left_out", o.omitted)
		} else {
			r.log.Info("every tool definition fits the budget again", "budget_tokens", r.budget, "offered_tokens", o.tokens)
		}
	}
	r.omitLog = o.omitted
	return o
}

// Offer reports what the definition budget keeps: the estimated tokens of the definitions
// offered with each model call, and the names left out (nil when none).
func (r *Registry) Offer() (tokens int, leftOut []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.offerLocked()
	return o.tokens, slices.Clone(o.omitted)
}

// Offered returns the tools offered to the model: All within the definition budget.
func (r *Registry) Offered() []*Tool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.offerLocked().kept)
}

// Get returns the tool named name.
func (r *Registry) Get(name string) (*Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.byName[name]
	return t, ok
}

// All returns the tools in declaration order.
func (r *Registry) All() []*Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*Tool(nil), r.order...)
}

// Export returns the offered tools' definitions in a provider's format: FormatAnthropic gets
// AnthropicTools, any other format (openai, the demo model) OpenAITools.
func (r *Registry) Export(format string) []json.RawMessage {
	if format == FormatAnthropic {
		return r.AnthropicTools()
	}
	return r.OpenAITools()
}

// cached returns format's definitions of the offered tools, building them with build on the
// first call after the tools changed. The definitions are shared by every caller: the returned
// slice is the caller's, the bytes of each definition are read-only.
func (r *Registry) cached(format string, build func([]*Tool) []json.RawMessage) []json.RawMessage {
	r.mu.RLock()
	defs, ok := r.exported[format]
	r.mu.RUnlock()
	if !ok {
		r.mu.Lock()
		if defs, ok = r.exported[format]; !ok {
			defs = build(r.offerLocked().kept)
			if r.exported == nil {
				r.exported = map[string][]json.RawMessage{}
			}
			r.exported[format] = defs
		}
		r.mu.Unlock()
	}
	return slices.Clone(defs)
}

// OpenAITools exports the tools in the OpenAI Chat Completions format, the parameter schema
// byte for byte as declared. A provider tool is exported with its native definition only when
// that definition is in the OpenAI format: Anthropic's hosted tools (web_search_20250305) mean
// nothing to an OpenAI-compatible endpoint, which would reject the whole request.
//
// The definitions are built once per change of the tools and shared (read-only).
func (r *Registry) OpenAITools() []json.RawMessage { return r.cached(FormatOpenAI, openAITools) }

func openAITools(all []*Tool) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(all))
	for _, t := range all {
		if t.Executor() == Provider {
			if t.NativeFormat() == FormatOpenAI {
				out = append(out, t.Native())
			}
			continue
		}
		var b bytes.Buffer
		b.WriteString(`{"type":"function","function":{"name":`)
		writeString(&b, t.Name())
		b.WriteString(`,"description":`)
		writeString(&b, t.Description())
		b.WriteString(`,"parameters":`)
		b.Write(t.Parameters())
		b.WriteString(`}}`)
		out = append(out, slices.Clip(b.Bytes())) // shared: no room to append into
	}
	return out
}

// AnthropicTools exports the tools in the Anthropic Messages format, the parameter schema byte
// for byte as input_schema. A provider tool (hosted web search) is exported with its native
// definition when that definition is in the Anthropic format.
//
// The definitions are built once per change of the tools and shared (read-only).
func (r *Registry) AnthropicTools() []json.RawMessage {
	return r.cached(FormatAnthropic, anthropicTools)
}

func anthropicTools(all []*Tool) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(all))
	for _, t := range all {
		if t.Executor() == Provider {
			if t.NativeFormat() == FormatAnthropic {
				out = append(out, t.Native())
			}
			continue
		}
		var b bytes.Buffer
		b.WriteString(`{"name":`)
		writeString(&b, t.Name())
		b.WriteString(`,"description":`)
		writeString(&b, t.Description())
		b.WriteString(`,"input_schema":`)
		b.Write(t.Parameters())
		b.WriteString(`}`)
		out = append(out, slices.Clip(b.Bytes())) // shared: no room to append into
	}
	return out
}

// writeString writes s as a JSON string. json.Marshal of a map would compact and HTML-escape an
// embedded json.RawMessage, so the definition is assembled by hand around the verbatim schema.
func writeString(b *bytes.Buffer, s string) {
	enc, _ := marshalText(s) // a string always encodes
	b.Write(enc)
}

func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
