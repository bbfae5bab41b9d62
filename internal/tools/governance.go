package tools

import (
	"fmt"
	"strconv"
	"time"
)

// TimeoutAction is what happens to an approval nobody decided in time.
type TimeoutAction string

// Timeout actions.
const (
	// TimeoutDeny ends the call as expired (a timeout error the model reads). The default.
	TimeoutDeny TimeoutAction = "deny"
	// TimeoutEscalate lets admins decide the call, with a new deadline; when that one passes
	// too, the call expires.
	TimeoutEscalate TimeoutAction = "escalate"
)

// MaxApproverCount bounds M of an M-of-N approval.
const MaxApproverCount = 10

// checkGovernance checks and completes a declaration's governance fields: rules compiled, counts
// and approvers consistent, the timeout action known.
func checkGovernance(s *Spec) error {
	badAt := func(field, rule string, err error) error {
		return &DefinitionError{Tool: s.Name, Rule: rule, Field: field, Err: err}
	}
	if s.ApproverCount < 0 || s.ApproverCount > MaxApproverCount {
		return badAt("/approvers/count", fmt.Sprintf("the approver count must be between 1 and %d", MaxApproverCount), nil)
	}
	if s.ApproverCount > 1 && s.Approvers != ByReviewer {
		return badAt("/approvers", "several approvers must be reviewers (the owner never counts)", nil)
	}
	if s.ApprovalTimeout < 0 {
		return badAt("/approval_timeout_secs", "the approval timeout must not be negative", nil)
	}
	switch s.OnApprovalTimeout {
	case "":
		s.OnApprovalTimeout = TimeoutDeny
	case TimeoutDeny, TimeoutEscalate:
	default:
		return badAt("/on_approval_timeout", fmt.Sprintf("%q is not one of deny, escalate", s.OnApprovalTimeout), nil)
	}
	rules := make([]Rule, len(s.Rules))
	for i, r := range s.Rules {
		at := "/rules/" + strconv.Itoa(i)
		if !r.compiled() {
			c, err := CompileRule(r)
			if err != nil {
				return badAt(at, "rule does not compile", err)
			}
			r = c
		}
		if r.Action == RuleAsk && (s.Executor == Human || s.Executor == Provider) {
			return badAt(at+"/action", fmt.Sprintf("a %s tool cannot ask for approval (only server and client tools can be gated)", s.Executor), nil)
		}
		switch r.Approvers {
		case "", ByOwner, ByReviewer:
		default:
			return badAt(at+"/approvers", fmt.Sprintf("approvers %q is not one of owner, reviewer", r.Approvers), nil)
		}
		if r.Count < 0 || r.Count > MaxApproverCount {
			return badAt(at+"/approvers/count", fmt.Sprintf("the approver count must be between 1 and %d", MaxApproverCount), nil)
		}
		if r.Count > 1 && r.Approvers != ByReviewer {
			return badAt(at+"/approvers", "several approvers must be reviewers (the owner never counts)", nil)
		}
		rules[i] = r
	}
	s.Rules = rules
	if s.RulesShadow && len(s.Rules) == 0 {
		return badAt("/rules_mode", "shadow mode needs rules", nil)
	}
	return nil
}

// ApproverCount is how many distinct approvers a gated call of the tool needs (at least 1).
func (t *Tool) ApproverCount() int { return max(1, t.spec.ApproverCount) }

// ApprovalTimeout is how long an approval of the tool may wait; 0 when the tool sets none (its
// suspension timeout applies).
func (t *Tool) ApprovalTimeout() time.Duration { return t.spec.ApprovalTimeout }

// OnApprovalTimeout is what happens when an approval of the tool waits past its timeout.
func (t *Tool) OnApprovalTimeout() TimeoutAction { return t.spec.OnApprovalTimeout }
