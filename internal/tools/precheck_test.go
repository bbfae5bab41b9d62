package tools

import (
	"context"
	"errors"
	"parley/internal/fault"
	"strings"
	"testing"
)

// TestPrecheck: a tool without a precheck passes every call; a *fault.Error refuses the call with
// that error as is; any other error and a panic are internal, showing the model only a
// reference; an internal *fault.Error is hidden the same way.
func TestPrecheck(t *testing.T) {
	plain := mustTool(t, Spec{Name: "plain", Executor: Server, Func: noop})
	if plain.HasPrecheck() || plain.Precheck(context.Background(), nil) != nil {
		t.Fatal("a tool without a precheck must pass every call")
	}
	refused := fault.Errorf(fault.KindBlockedHost, "host is not allowed")
	cases := []struct {
		name     string
		check    PrecheckFunc
		kind     fault.Kind
		contains string
	}{
		{"passes", func(context.Context, map[string]any) error { return nil }, "", ""},
		{"tool error shown as is", func(context.Context, map[string]any) error { return refused }, fault.KindBlockedHost, "host is not allowed"},
		{"wrapped tool error", func(context.Context, map[string]any) error { return errors.Join(errors.New("ctx"), refused) }, fault.KindBlockedHost, "host is not allowed"},
		{"plain error is internal", func(context.Context, map[string]any) error { return errors.New("secret dsn postgres://u:p@h") }, fault.KindInternal, "reference ref_"},
		{"internal tool error is hidden", func(context.Context, map[string]any) error { return fault.Errorf(fault.KindInternal, "secret detail") }, fault.KindInternal, "reference ref_"},
		{"panic is internal", func(context.Context, map[string]any) error { panic("secret panic") }, fault.KindInternal, "reference ref_"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var saw map[string]any
			tool := mustTool(t, Spec{Name: "checked", Executor: Server, Func: noop, Precheck: func(ctx context.Context, args map[string]any) error {
				saw = args
				return c.check(ctx, args)
			}})
			if !tool.HasPrecheck() {
				t.Fatal("HasPrecheck = false")
			}
			e := tool.Precheck(context.Background(), map[string]any{"city": "Paris"})
			if saw["city"] != "Paris" {
				t.Fatalf("the precheck saw %v, want the call's arguments", saw)
			}
			if c.kind == "" {
				if e != nil {
					t.Fatalf("Precheck = %v, want nil", e)
				}
				return
			}
			if e == nil || e.Kind != c.kind || !strings.Contains(e.Message, c.contains) {
				t.Fatalf("Precheck = %v, want %s containing %q", e, c.kind, c.contains)
			}
			if strings.Contains(e.Message, "secret") {
				t.Fatalf("an internal cause reached the model: %q", e.Message)
			}
		})
	}
}
