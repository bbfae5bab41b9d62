package agent

import (
	"encoding/json"
	"fmt"

	"parley/internal/fault"
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
					content = tools.ErrorEnvelope(fault.New(fault.KindInternal, "the call has no result", nil))
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
	// The definitions offered (within the registry's own budget) come out of the context
	// budget first: the conversation gets what they leave.
	switch a.cfg().Provider.ToolFormat() {
	case "anthropic":
		req.Tools = a.cfg().Tools.AnthropicTools()
	default:
		req.Tools = a.cfg().Tools.OpenAITools()
	}
	if dropped := fitBudget(&req, a.cfg().ContextBudget); dropped > 0 {
		req.System += fmt.Sprintf("\n\n(%d earlier messages of this conversation were left out of this request to fit the context window.)", dropped)
	}
	return req
}

// bytesPerToken is the estimate of a token's size in the context budget: rough, and on the
// safe side for English and JSON.
const bytesPerToken = 4

// estimateTokens is the budget's estimate of a message.
func estimateTokens(m llm.Message) int {
	n := len(m.Content) + len(m.ToolCallID) + 8
	for _, tc := range m.ToolCalls {
		n += len(tc.ID) + len(tc.Name) + len(tc.Args) + len(tc.Result) + 8
	}
	return n/bytesPerToken + 1
}

// toolTokens is the budget's estimate of the tool definitions of a request.
func toolTokens(defs []json.RawMessage) int {
	n := 0
	for _, d := range defs {
		n += len(d)/bytesPerToken + 1
	}
	return n
}

// fitBudget leaves the oldest whole turns (from a user message up to the next) out of req
// until its messages' estimate, with its tool definitions', is within budget tokens, and says
// how many messages it left out. The newest turn always stays, whatever its size: the model must see what it answers
// (its old results are compacted by retention first). Cutting at user messages keeps every
// tool call with its result, and the request starting with the user's turn.
func fitBudget(req *llm.Request, budget int) int {
	total := toolTokens(req.Tools)
	sizes := make([]int, len(req.Messages))
	for i, m := range req.Messages {
		sizes[i] = estimateTokens(m)
		total += sizes[i]
	}
	if total <= budget {
		return 0
	}
	var starts []int // where each turn begins: its user message
	for i, m := range req.Messages {
		if m.Role == llm.RoleUser {
			starts = append(starts, i)
		}
	}
	cut := 0
	for k := 1; k < len(starts) && total > budget; k++ {
		for j := cut; j < starts[k]; j++ {
			total -= sizes[j]
		}
		cut = starts[k]
	}
	if cut == 0 {
		return 0
	}
	req.Messages = append([]llm.Message(nil), req.Messages[cut:]...)
	return cut
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
