package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"parley/internal/fault"
	"parley/internal/llm"
)

// sdkParams is how the request was built with the SDK's parameter types before body replaced
// it; it stays here as the reference body must agree with.
func sdkParams(model string, req llm.Request) openai.ChatCompletionNewParams {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleUser:
			msgs = append(msgs, openai.UserMessage(m.Content))
		case llm.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				if tc.Provider {
					continue
				}
				args := string(tc.Args)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
					},
				})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case llm.RoleTool:
			msgs = append(msgs, openai.ToolMessage(m.Content, m.ToolCallID))
		}
	}
	params := openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, t := range req.Tools {
		ft := param.Override[openai.ChatCompletionFunctionToolParam](json.RawMessage(t))
		params.Tools = append(params.Tools, openai.ChatCompletionToolUnionParam{OfFunction: &ft})
	}
	if req.MaxTokens > 0 {
		params.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	return params
}

// sdkBody is the SDK's encoding of the request as NewStreaming sent it: the parameters, plus
// "stream": true.
func sdkBody(t testing.TB, model string, req llm.Request) []byte {
	b, err := sdkParams(model, req).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["stream"] = true
	out, _ := json.Marshal(m)
	return out
}

var wireRequests = []llm.Request{
	{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}},
	{System: "be brief <&> \u2028", MaxTokens: 4096, Messages: []llm.Message{{Role: llm.RoleUser, Content: ""}}},
	{
		System: "sys",
		Tools: []json.RawMessage{
			json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`),
			json.RawMessage(`{"type":"function","function":{"name":"send","parameters":{"type":"object"},"strict":true}}`),
		},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "where am I \"quoted\" é"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "geolocation", Args: json.RawMessage(`{"precise":true}`)},
				{ID: "call_2", Name: "noargs"},
				{ID: "srvtoolu_1", Name: "web_search", Provider: true, Result: json.RawMessage(`{}`)},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Content: `{"ok":true,"result":{"lat":1}}`},
			{Role: llm.RoleTool, ToolCallID: "call_2", Content: ""},
			{Role: llm.RoleAssistant, Content: "You are here."},
			{Role: llm.RoleAssistant, Content: ""},
			{Role: llm.RoleAssistant, Content: "Checking.", ToolCalls: []llm.ToolCall{{ID: "call_3", Name: "x", Args: json.RawMessage(`{}`)}}},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "srvtoolu_2", Name: "web_search", Provider: true}}},
		},
	},
}

// TestBodyMatchesTheSDKsEncoding pins the hand-made request body to what the SDK's own types
// encoded, message shape by message shape.
func TestBodyMatchesTheSDKsEncoding(t *testing.T) {
	p := &Provider{model: "gpt-4o-mini"}
	for i, req := range wireRequests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, err := p.body(req)
			if err != nil {
				t.Fatal(err)
			}
			if want := sdkBody(t, p.model, req); !jsonEqual(t, got, want) {
				t.Errorf("body:\n%s\nthe SDK's:\n%s", got, want)
			}
		})
	}
	if _, err := p.body(llm.Request{Tools: []json.RawMessage{json.RawMessage(`{`)}}); err == nil {
		t.Error("a tool that is not JSON was encoded")
	}
	if _, err := p.body(llm.Request{Messages: []llm.Message{{Role: "narrator"}}}); err == nil {
		t.Error("a message of an unknown role was encoded")
	}
}

// BenchmarkEncodeRequest compares the SDK's encoding of a typical request (system prompt, a
// dozen tools, the approve path's four messages) with body's.
func BenchmarkEncodeRequest(b *testing.B) {
	req := wireRequests[2]
	for range 10 {
		req.Tools = append(req.Tools, req.Tools[0])
	}
	p := &Provider{model: "gpt-4o-mini"}
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			params := sdkParams(p.model, req)
			if _, err := params.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("body", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.body(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMalformedChunkIsARetryableInvalidResponse: a chunk that is not JSON, or whose fields have
// the wrong types, ends the call as an invalid response worth retrying, not a panic or a cut.
func TestMalformedChunkIsARetryableInvalidResponse(t *testing.T) {
	for name, bad := range map[string]string{
		"not JSON":   `{"choices":[{"index":0,"delta":{"content":"Hi"`,
		"wrong type": `{"choices":[{"index":"zero","delta":{"content":7},"finish_reason":"stop"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, sse(delta(`{"content":"Hi"}`, ""), bad, "[DONE]"))
			_, _, err := collect(t, s.provider(t, nil), context.Background(), userReq("hi"))
			var le *llm.Error
			if !errors.As(err, &le) || !le.Retryable || le.Kind != string(fault.KindInvalidResponse) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
