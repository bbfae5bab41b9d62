package tools

import (
	"encoding/json"
	"fmt"
)

// Registry holds the tools a conversation may call, by unique name, in declaration order.
// It is built at start-up and read-only afterwards.
type Registry struct {
	byName map[string]*Tool
	order  []*Tool
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
	if t == nil {
		return fmt.Errorf("register tool: nil tool")
	}
	if _, dup := r.byName[t.Name()]; dup {
		return &DefinitionError{Tool: t.Name(), Rule: "duplicate name in registry"}
	}
	r.byName[t.Name()] = t
	r.order = append(r.order, t)
	return nil
}

// Get returns the tool named name.
func (r *Registry) Get(name string) (*Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// All returns the tools in declaration order.
func (r *Registry) All() []*Tool { return append([]*Tool(nil), r.order...) }

// OpenAITools exports the tools in the OpenAI Chat Completions format, the parameter schema
// verbatim. Provider tools are exported with their native definition.
func (r *Registry) OpenAITools() []json.RawMessage {
	out := make([]json.RawMessage, 0, len(r.order))
	for _, t := range r.order {
		if t.Executor() == Provider {
			if len(t.Native()) > 0 {
				out = append(out, t.Native())
			}
			continue
		}
		b, _ := json.Marshal(map[string]any{
			"type": "function",
			"function": map[string]any{
				"name":        t.Name(),
				"description": t.Description(),
				"parameters":  t.Parameters(),
			},
		})
		out = append(out, b)
	}
	return out
}

// AnthropicTools exports the tools in the Anthropic Messages format, the parameter schema
// verbatim as input_schema. Provider tools (server tools such as web search) are exported with
// their native definition.
func (r *Registry) AnthropicTools() []json.RawMessage {
	out := make([]json.RawMessage, 0, len(r.order))
	for _, t := range r.order {
		if t.Executor() == Provider {
			if len(t.Native()) > 0 {
				out = append(out, t.Native())
			}
			continue
		}
		b, _ := json.Marshal(map[string]any{
			"name":         t.Name(),
			"description":  t.Description(),
			"input_schema": t.Parameters(),
		})
		out = append(out, b)
	}
	return out
}
