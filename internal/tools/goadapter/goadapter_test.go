package goadapter

import (
	"context"
	"errors"
	"testing"
	"time"

	"parley/internal/fault"
	"parley/internal/tools"
)

type reprice struct{ calls int }

func (r *reprice) Run(ctx context.Context, params map[string]any) (any, error) {
	r.calls++
	return map[string]any{"repriced": params["invoice_id"]}, nil
}

func TestRegister(t *testing.T) {
	r := NewRegistry()
	ok := Func(func(context.Context, map[string]any) (any, error) { return nil, nil })
	tests := []struct {
		name string
		e    Entry
		ok   bool
	}{
		{"valid", Entry{Key: "billing.load_invoice", Adapter: ok, Enabled: true}, true},
		{"duplicate", Entry{Key: "billing.load_invoice", Adapter: ok}, false},
		{"upper case", Entry{Key: "Billing.Load", Adapter: ok}, false},
		{"path-like", Entry{Key: "../etc", Adapter: ok}, false},
		{"empty segment", Entry{Key: "billing..x", Adapter: ok}, false},
		{"nil adapter", Entry{Key: "billing.nil"}, false},
	}
	for _, tc := range tests {
		if err := r.Register(tc.e); (err == nil) != tc.ok {
			t.Errorf("%s: Register = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestLookupAndList(t *testing.T) {
	r := NewRegistry()
	_ = r.Register(Entry{Key: "b.on", Adapter: &reprice{}, Enabled: true, Label: "On", Category: "Billing"})
	_ = r.Register(Entry{Key: "a.off", Adapter: &reprice{}, Enabled: false})
	if err := r.Validate("b.on"); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate("a.off"); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled: %v", err)
	}
	if err := r.Validate("nope"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown: %v", err)
	}
	var nilReg *Registry
	if err := nilReg.Validate("b.on"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("nil registry: %v", err)
	}
	l := r.List()
	if len(l) != 2 || l[0].Key != "a.off" || l[1].Label != "On" || l[1].Category != "Billing" || !l[1].Enabled {
		t.Fatalf("List = %+v", l)
	}
	if err := r.SetEnabled("nope", true); !errors.Is(err, ErrUnknown) {
		t.Fatalf("SetEnabled unknown: %v", err)
	}
}

func TestToolFuncOutcomes(t *testing.T) {
	visible := fault.Errorf(fault.KindNotFound, "no invoice inv_9")
	r := NewRegistry()
	rp := &reprice{}
	entries := map[string]Adapter{
		"b.ok":      rp,
		"b.visible": Func(func(context.Context, map[string]any) (any, error) { return nil, visible }),
		"b.hidden":  Func(func(context.Context, map[string]any) (any, error) { return nil, errors.New("db password wrong") }),
		"b.retry": Func(func(context.Context, map[string]any) (any, error) {
			return nil, Retry(errors.New("busy"), 3*time.Second)
		}),
		"b.retry_kind": Func(func(context.Context, map[string]any) (any, error) {
			return nil, Retry(fault.Errorf(fault.KindRateLimited, "slow down"), 0)
		}),
	}
	for k, a := range entries {
		if err := r.Register(Entry{Key: k, Adapter: a, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	call := tools.Call{ToolCallID: "c"}
	res, err := ToolFunc(r, "b.ok")(context.Background(), call, map[string]any{"invoice_id": "inv_1"})
	if err != nil || res.(map[string]any)["repriced"] != "inv_1" {
		t.Fatalf("ok: %v %v", res, err)
	}

	tool, err := tools.New(tools.Spec{Name: "t", Executor: tools.Server, Func: ToolFunc(r, "b.visible")})
	if err != nil {
		t.Fatal(err)
	}
	if o := tool.Execute(context.Background(), call, nil); o.Status != tools.ToolError || o.Err.Kind != fault.KindNotFound {
		t.Fatalf("visible error outcome = %+v", o)
	}
	tool, _ = tools.New(tools.Spec{Name: "t", Executor: tools.Server, Func: ToolFunc(r, "b.hidden")})
	if o := tool.Execute(context.Background(), call, nil); o.Status != tools.Internal {
		t.Fatalf("hidden error outcome = %+v, want internal", o)
	}

	_, err = ToolFunc(r, "b.retry")(context.Background(), call, nil)
	var te *fault.Error
	if !errors.As(err, &te) || !te.Retryable || te.RetryAfter != 3*time.Second || te.Kind != fault.KindServiceUnavailable {
		t.Fatalf("retry: %+v", err)
	}
	_, err = ToolFunc(r, "b.retry_kind")(context.Background(), call, nil)
	if !errors.As(err, &te) || !te.Retryable || te.Kind != fault.KindRateLimited {
		t.Fatalf("retry with kind: %+v", err)
	}
}

// TestResolvedAtExecution: disabling an adapter after a tool was built refuses the next call,
// and enabling it again lets calls through, without rebuilding the tool.
func TestResolvedAtExecution(t *testing.T) {
	r := NewRegistry()
	rp := &reprice{}
	_ = r.Register(Entry{Key: "billing.reprice", Adapter: rp, Enabled: true})
	f := ToolFunc(r, "billing.reprice")
	if _, err := f(context.Background(), tools.Call{}, nil); err != nil {
		t.Fatal(err)
	}
	_ = r.SetEnabled("billing.reprice", false)
	_, err := f(context.Background(), tools.Call{}, nil)
	var te *fault.Error
	if !errors.As(err, &te) || te.Kind != fault.KindPermissionDenied || te.Retryable {
		t.Fatalf("disabled at execution: %v", err)
	}
	_ = r.SetEnabled("billing.reprice", true)
	if _, err := f(context.Background(), tools.Call{}, nil); err != nil {
		t.Fatal(err)
	}
	if rp.calls != 2 {
		t.Fatalf("adapter ran %d times, want 2", rp.calls)
	}
	if err := Precheck(r, "billing.reprice")(context.Background(), nil); err != nil {
		t.Fatalf("precheck of an enabled adapter: %v", err)
	}
	_ = r.SetEnabled("billing.reprice", false)
	if err := Precheck(r, "billing.reprice")(context.Background(), nil); !errors.As(err, &te) || te.Kind != fault.KindPermissionDenied {
		t.Fatalf("precheck of a disabled adapter: %v", err)
	}
	if rp.calls != 2 {
		t.Fatal("a precheck ran the adapter")
	}
	_, err = ToolFunc(r, "billing.unknown")(context.Background(), tools.Call{}, nil)
	if !errors.As(err, &te) || te.Kind != fault.KindPermissionDenied {
		t.Fatalf("unknown at execution: %v", err)
	}
}
