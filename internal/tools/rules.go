package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// RuleAction is what a matching rule does with a call.
type RuleAction string

// Rule actions.
const (
	// RuleAllow runs the call without a suspension, even when the tool requires approval.
	RuleAllow RuleAction = "allow"
	// RuleDeny ends the call with the error kind denied and the rule's reason; nothing runs.
	RuleDeny RuleAction = "deny"
	// RuleAsk suspends the call for approval by the rule's approvers, even when the tool is auto.
	RuleAsk RuleAction = "ask"
)

// Rule is one conditional gate of a tool: when its CEL condition holds for a call, its action
// decides the call (the first matching rule of the tool wins). Compile checks it; a Rule that
// has not been compiled never matches.
type Rule struct {
	// When is a CEL expression over args (the call's arguments), user ({"id","name","role"} of
	// the conversation's owner) and tool (the tool's name), with CEL's string extensions and the
	// rule helpers (rulefuncs.go: fold, emailDomain, urlHost, num); it must be boolean.
	When   string
	Action RuleAction
	// Reason is what the model reads when the rule denies a call.
	Reason string
	// Approvers and Count say who decides a call the rule asks about; empty and 0 take the
	// tool's own.
	Approvers Approvers
	Count     int

	prg cel.Program
}

// RuleUser is the owner of the conversation a call belongs to, as rules see them.
type RuleUser struct {
	ID   string
	Name string
	Role string
}

// RuleMatch is the rule that decided a call: its index in the tool's rules and the rule. Err is
// set when evaluating a rule failed (a missing key, say): evaluation stopped there, and the
// call is asked about (RuleAsk with the tool's approvers) rather than let through.
type RuleMatch struct {
	Index int
	Rule  Rule
	Err   error
}

// ruleCostLimit bounds the work of evaluating one condition (CEL's cost units): a condition is
// a short predicate, and a model's arguments must not make one run for long.
const ruleCostLimit = 100_000

var ruleEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("user", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("tool", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		ruleHelpers(), // fold, emailDomain, urlHost, num (rulefuncs.go)
	)
})

// CompileRule parses and type-checks a rule's condition and checks its action. The error
// names what is wrong; the tools file shows it at the rule's path.
func CompileRule(r Rule) (Rule, error) {
	switch r.Action {
	case RuleAllow, RuleDeny, RuleAsk:
	default:
		return r, fmt.Errorf("action %q is not one of allow, deny, ask", r.Action)
	}
	if r.Action != RuleAsk && (r.Approvers != "" || r.Count != 0) {
		return r, errors.New("only an ask rule has approvers")
	}
	if r.Action != RuleDeny && r.Reason != "" {
		return r, errors.New("only a deny rule has a reason")
	}
	env, err := ruleEnv()
	if err != nil {
		return r, fmt.Errorf("rule environment: %w", err)
	}
	ast, iss := env.Compile(r.When)
	if iss != nil && iss.Err() != nil {
		return r, fmt.Errorf("condition does not compile: %w", iss.Err())
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return r, fmt.Errorf("condition must be boolean, not %s", ast.OutputType())
	}
	r.prg, err = env.Program(ast, cel.CostLimit(ruleCostLimit), helperCosts())
	if err != nil {
		return r, fmt.Errorf("condition does not compile: %w", err)
	}
	return r, nil
}

// compiled reports whether the rule went through CompileRule.
func (r Rule) compiled() bool { return r.prg != nil }

// eval runs the rule's condition on a call.
func (r Rule) eval(vars map[string]any) (bool, error) {
	if r.prg == nil {
		return false, errors.New("the rule was not compiled")
	}
	out, _, err := r.prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("condition gave %s, not a boolean", typeName(out))
	}
	return bool(b), nil
}

func typeName(v ref.Val) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().TypeName()
}

// Rules returns the tool's rules, in order.
func (t *Tool) Rules() []Rule { return append([]Rule(nil), t.spec.Rules...) }

// RulesShadow reports whether the tool's rules only record what they would decide.
func (t *Tool) RulesShadow() bool { return t.spec.RulesShadow }

// MatchRule evaluates the tool's rules on a call's arguments (raw JSON) for its owner, in
// order, and returns the first that matches; ok is false when none does (the tool's own
// approval applies). A rule whose evaluation fails stops the search: the match has Err set.
func (t *Tool) MatchRule(args json.RawMessage, user RuleUser) (m RuleMatch, ok bool) {
	if len(t.spec.Rules) == 0 {
		return RuleMatch{}, false
	}
	vars := map[string]any{
		"args": ruleArgs(args),
		"user": map[string]string{"id": user.ID, "name": user.Name, "role": user.Role},
		"tool": t.spec.Name,
	}
	for i, r := range t.spec.Rules {
		hit, err := r.eval(vars)
		if err != nil {
			return RuleMatch{Index: i, Rule: r, Err: err}, true
		}
		if hit {
			return RuleMatch{Index: i, Rule: r}, true
		}
	}
	return RuleMatch{}, false
}

// ruleArgs decodes arguments for CEL: integers as int64, other numbers as float64 (CEL has no
// json.Number); anything but an object is an empty map.
func ruleArgs(raw json.RawMessage) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return map[string]any{}
	}
	m, ok := celValue(v).(map[string]any)
	if !ok {
		return map[string]any{}
	}
	return m
}

func celValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = celValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = celValue(e)
		}
		return x
	}
	return v
}
