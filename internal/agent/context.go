package agent

import (
	"encoding/json"

	"parley/internal/llm"
	"parley/internal/tools"
)

// buildRequest assembles the model's context from the conversation: messages in order, each
// assistant message followed by its calls' results in call order with matching ids. Old results
// are compacted first (see evictions); the log keeps them whole.
func (a *actor) buildRequest() llm.Request {
	st := a.st
	evict := evictions(st)
	msgs := make([]llm.Message, 0, len(st.items)*2)
	for _, it := range st.items {
		switch it.role {
		case llm.RoleUser:
			msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: it.text})
		case llm.RoleAssistant:
			m := llm.Message{Role: llm.RoleAssistant, Content: it.text}
			var results []llm.Message
			for _, id := range it.callIDs {
				c := st.calls[id]
				if c == nil {
					continue
				}
				tc := llm.ToolCall{ID: c.id, Name: c.name, Args: c.args}
				if c.executor == tools.Provider {
					tc.Provider, tc.Result = true, c.result
					m.ToolCalls = append(m.ToolCalls, tc)
					continue
				}
				m.ToolCalls = append(m.ToolCalls, tc)
				content := c.result
				switch {
				case content == nil:
					content = tools.ErrorEnvelope(tools.NewError(tools.KindInternal, "the call has no result", nil))
				case evict[c.id]:
					content = placeholder(c)
				}
				results = append(results, llm.Message{Role: llm.RoleTool, ToolCallID: c.id, Content: string(content)})
			}
			msgs = append(msgs, m)
			msgs = append(msgs, results...)
		}
	}
	req := llm.Request{System: a.cfg().System, Messages: msgs, MaxTokens: a.cfg().MaxTokens}
	switch a.cfg().Provider.ToolFormat() {
	case "anthropic":
		req.Tools = a.cfg().Tools.AnthropicTools()
	default:
		req.Tools = a.cfg().Tools.OpenAITools()
	}
	return req
}

// evictions applies each tool's retention to the results in the context: a result older than
// MaxAgeTurns user turns, or beyond the newest MaxCount results of its tool, is replaced by a
// placeholder, unless the tool never evicts. Results of the newest response, which the model has
// not read yet, are never evicted (they still count towards MaxCount).
func evictions(st *convState) map[string]bool {
	exempt := map[string]bool{}
	if st.turnOpen && st.current >= 0 {
		for _, id := range st.items[st.current].callIDs {
			exempt[id] = true
		}
	}
	evict := map[string]bool{}
	seen := map[string]int{}
	for i := len(st.order) - 1; i >= 0; i-- {
		c := st.calls[st.order[i]]
		if c == nil || c.tool == nil || c.executor == tools.Provider || !c.finished() {
			continue
		}
		r := c.tool.Retention()
		rank := seen[c.name]
		seen[c.name]++
		if r.NeverEvict || exempt[c.id] {
			continue
		}
		if (r.MaxCount > 0 && rank >= r.MaxCount) || (r.MaxAgeTurns > 0 && st.turn-c.turn >= r.MaxAgeTurns) {
			evict[c.id] = true
		}
	}
	return evict
}

// placeholder is the short envelope that stands in for an evicted result.
func placeholder(c *call) json.RawMessage {
	var env struct {
		OK bool `json:"ok"`
	}
	_ = json.Unmarshal(c.result, &env)
	return mustJSON(map[string]any{
		"ok":        env.OK,
		"compacted": true,
		"note":      "this result of " + c.name + " was removed from the context to save space; the conversation log keeps it",
	})
}
