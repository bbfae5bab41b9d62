package tools

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// syncBuffer collects a logger's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDefinitionBudget: 300 large MCP tool definitions are cut to the budget across every
// source, in the registry's order (static tools first, then sources in the order first set);
// what is left out is logged once per change and reported by Offer.
func TestDefinitionBudget(t *testing.T) {
	var logs syncBuffer
	r, err := NewRegistry(mustTool(t, Spec{Name: "builtin", Description: "a built-in", Executor: Server, Func: noop}))
	if err != nil {
		t.Fatal(err)
	}
	const budget = 50_000
	r.SetDefinitionBudget(budget, slog.New(slog.NewTextHandler(&logs, nil)))
	// The first server is declared before the second, though the second lists first.
	if err := r.SetSource("mcp:first", nil); err != nil {
		t.Fatal(err)
	}
	big := func(prefix string, n int) []*Tool {
		var ts []*Tool
		for i := range n {
			ts = append(ts, mustTool(t, Spec{Name: fmt.Sprintf("%s__t%d", prefix, i), Description: strings.Repeat("d", 4000),
				Parameters: []byte(`{"type":"object","properties":{"x":{"type":"string","description":"` + strings.Repeat("p", 8000) + `"}}}`),
				Executor:   Server, Func: noop}))
		}
		return ts
	}
	if err := r.SetSource("mcp:second", big("second", 10)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSource("mcp:first", big("first", 300)); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{FormatOpenAI, FormatAnthropic} {
		defs := r.Export(format)
		total := 0
		for _, d := range defs {
			total += len(d)/4 + 1
		}
		if total > budget {
			t.Errorf("%s: %d definitions of %d tokens, budget %d", format, len(defs), total, budget)
		}
		if !strings.Contains(string(defs[0]), `"builtin"`) || !strings.Contains(string(defs[1]), `"first__t0"`) {
			t.Errorf("%s: not in the registry's order: %.60s, %.60s", format, defs[0], defs[1])
		}
	}
	tokens, leftOut := r.Offer()
	kept := r.Offered()
	if tokens > budget || len(kept)+len(leftOut) != 311 || len(kept) < 10 {
		t.Fatalf("offered %d tools in %d tokens, left out %d", len(kept), tokens, len(leftOut))
	}
	if leftOut[len(leftOut)-1] != "second__t9" || kept[len(kept)-1].Name() == "second__t0" {
		t.Errorf("the second server's tools should be left out after the first's: last kept %s, left out %v", kept[len(kept)-1].Name(), leftOut[len(leftOut)-3:])
	}
	// Once per change: more model calls do not log again, nor does a listing that leaves the
	// same tools out.
	r.OpenAITools()
	r.AnthropicTools()
	if err := r.SetSource("mcp:second", big("second", 10)); err != nil {
		t.Fatal(err)
	}
	r.OpenAITools()
	if n := strings.Count(logs.String(), "left out of every model call"); n != 1 {
		t.Fatalf("logged %d times: %s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "second__t9") {
		t.Errorf("the log does not name what was left out: %.300s", logs.String())
	}
	// A change that lets everything in again says so.
	if err := r.SetSource("mcp:first", nil); err != nil {
		t.Fatal(err)
	}
	if _, leftOut := r.Offer(); len(leftOut) != 0 {
		t.Errorf("still left out: %v", leftOut)
	}
	if !strings.Contains(logs.String(), "fits the budget again") {
		t.Errorf("no line says every definition fits again: %s", logs.String())
	}
}

// TestSourceKeepsItsPlace: a source set again, or first set empty, keeps its place, so the
// order (and what a budget keeps) does not depend on which server answered first.
func TestSourceKeepsItsPlace(t *testing.T) {
	r, _ := NewRegistry(mustTool(t, Spec{Name: "s", Executor: Server, Func: noop}))
	one := func(name string) []*Tool { return []*Tool{mustTool(t, Spec{Name: name, Executor: Server, Func: noop})} }
	for _, step := range []struct {
		source string
		tools  []*Tool
	}{{"a", nil}, {"b", one("b1")}, {"a", one("a1")}, {"b", one("b2")}} {
		if err := r.SetSource(step.source, step.tools); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, x := range r.All() {
		got = append(got, x.Name())
	}
	if strings.Join(got, ",") != "s,a1,b2" {
		t.Fatalf("order %v", got)
	}
}
