package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Export formats, as named by llm.Provider.ToolFormat.
const (
	FormatOpenAI    = "openai"    // OpenAI Chat Completions "tools"
	FormatAnthropic = "anthropic" // Anthropic Messages "tools"
)

// Registry holds the tools a conversation may call, by unique name, in declaration order.
// It is built at start-up; afterwards only a dynamic source (an MCP server, SetSource) changes
// it, replacing its own tools as a whole. Every method is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	byName  map[string]*Tool    // guarded by mu
	order   []*Tool             // guarded by mu
	sources map[string][]string // guarded by mu: a dynamic source's tool names
	// exported holds each format's tool definitions as last built (every model call sends
	// them); guarded by mu, emptied whenever the tools change.
	exported map[string][]json.RawMessage
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

// Add registers t; a second tool of the same name is refused. Add is for building the registry
// before it is shared.
func (r *Registry) Add(t *Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addLocked(t)
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
	r.order = append(r.order, t)
	clear(r.exported)
	return nil
}

// SetSource replaces the tools of a dynamic source (an MCP server's, named by the server) with
// ts: the source's previous tools leave the registry, ts join it at the end. A tool whose name
// another source or a static tool already has is refused (its error is returned, joined with
// the others); the rest are added. Calls already holding a replaced *Tool keep it.
func (r *Registry) SetSource(source string, ts []*Tool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sources == nil {
		r.sources = map[string][]string{}
	}
	for _, name := range r.sources[source] {
		delete(r.byName, name)
	}
	old := r.sources[source]
	r.order = slices.DeleteFunc(r.order, func(t *Tool) bool { return slices.Contains(old, t.Name()) && r.byName[t.Name()] == nil })
	clear(r.exported)
	var errs []error
	var names []string
	for _, t := range ts {
		if err := r.addLocked(t); err != nil {
			errs = append(errs, err)
			continue
		}
		names = append(names, t.Name())
	}
	r.sources[source] = names
	if len(errs) > 0 {
		return fmt.Errorf("tools of %s: %w", source, joinErrors(errs))
	}
	return nil
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

// Export returns the tool definitions in a provider's format: FormatAnthropic gets
// AnthropicTools, any other format (openai, the demo model) OpenAITools.
func (r *Registry) Export(format string) []json.RawMessage {
	if format == FormatAnthropic {
		return r.AnthropicTools()
	}
	return r.OpenAITools()
}

// cached returns format's definitions, building them with build on the first call after the
// tools changed. The definitions are shared by every caller: the returned slice is the
// caller's, the bytes of each definition are read-only.
func (r *Registry) cached(format string, build func([]*Tool) []json.RawMessage) []json.RawMessage {
	r.mu.RLock()
	defs, ok := r.exported[format]
	r.mu.RUnlock()
	if !ok {
		r.mu.Lock()
		if defs, ok = r.exported[format]; !ok {
			defs = build(r.order)
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
