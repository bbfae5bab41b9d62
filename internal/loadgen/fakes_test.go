package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"parley/internal/llm"
	"parley/internal/llm/openai"
)

// TestModelServerSpeaksToTheOpenAIProvider: the approvals workload's fake model, driven by
// Parley's own OpenAI client, asks for deliver_email with the message's body, then answers
// "sent" once the tool's result is in the conversation.
func TestModelServerSpeaksToTheOpenAIProvider(t *testing.T) {
	m, err := StartModelServer()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := openai.New(openai.Config{APIKey: "k", BaseURL: m.BaseURL(), Model: "load"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "email bob: hello 7"}}
	resp, err := p.Stream(ctx, llm.Request{Messages: msgs}, func(llm.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "deliver_email" {
		t.Fatalf("first answer: %+v", resp)
	}
	var args struct{ To, Body string }
	if err := json.Unmarshal(resp.ToolCalls[0].Args, &args); err != nil || args.To != "bob" || args.Body != "hello 7" {
		t.Fatalf("arguments %s (%v)", resp.ToolCalls[0].Args, err)
	}
	msgs = append(msgs,
		llm.Message{Role: llm.RoleAssistant, ToolCalls: resp.ToolCalls},
		llm.Message{Role: llm.RoleTool, ToolCallID: resp.ToolCalls[0].ID, Content: `{"ok":true}`})
	resp, err = p.Stream(ctx, llm.Request{Messages: msgs}, func(llm.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "sent" || len(resp.ToolCalls) != 0 || resp.Usage.OutputTokens == 0 {
		t.Fatalf("final answer: %+v", resp)
	}
	if m.Calls() != 2 {
		t.Fatalf("model calls %d, want 2", m.Calls())
	}
}

// TestReceiverCounts: the webhook receiver counts calls, distinct bodies and idempotency keys,
// and refuses a body without arguments.
func TestReceiverCounts(t *testing.T) {
	rc, err := StartReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	post := func(key, body string) int {
		req, _ := http.NewRequest("POST", rc.URL(), bytes.NewBufferString(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct{ key, body string }{
		{"a", `{"arguments":{"body":"hello 1"}}`},
		{"b", `{"arguments":{"body":"hello 2"}}`},
		{"b", `{"arguments":{"body":"hello 2"}}`},
	} {
		if code := post(c.key, c.body); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	if code := post("c", `{"tool":"x"}`); code != http.StatusBadRequest {
		t.Fatalf("a call without arguments: status %d", code)
	}
	if calls, bodies, keys := rc.Counts(); calls != 3 || bodies != 2 || keys != 2 {
		t.Fatalf("counts %d calls, %d bodies, %d keys; want 3, 2, 2", calls, bodies, keys)
	}
}
