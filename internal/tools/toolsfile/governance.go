package toolsfile

import (
	"encoding/json"
	"time"

	"parley/internal/tools"
)

// approverSet reads an "approvers" value: a role ("owner", "reviewer") or {"role", "count"}.
// The schema has checked its shape.
func approverSet(raw json.RawMessage) (approvers string, count int) {
	if len(raw) == 0 {
		return "", 0
	}
	if json.Unmarshal(raw, &approvers) == nil {
		return approvers, 0
	}
	var set struct {
		Role  string `json:"role"`
		Count int    `json:"count"`
	}
	_ = json.Unmarshal(raw, &set)
	return set.Role, set.Count
}

// governance reads a tool's rules, rules_mode, approval_timeout_secs and on_approval_timeout
// into spec. tools.New compiles the rules and reports a bad one at /rules/<i>.
func governance(obj map[string]json.RawMessage, spec *tools.Spec) {
	var (
		rules []struct {
			When      string          `json:"when"`
			Action    string          `json:"action"`
			Reason    string          `json:"reason"`
			Approvers json.RawMessage `json:"approvers"`
		}
		mode, onTimeout, edits string
		approvalSecs           int
	)
	field(obj, "rules", &rules)
	field(obj, "rules_mode", &mode)
	field(obj, "approval_timeout_secs", &approvalSecs)
	field(obj, "on_approval_timeout", &onTimeout)
	field(obj, "edits", &edits)
	for _, r := range rules {
		approvers, count := approverSet(r.Approvers)
		spec.Rules = append(spec.Rules, tools.Rule{When: r.When, Action: tools.RuleAction(r.Action), Reason: r.Reason,
			Approvers: tools.Approvers(approvers), Count: count})
	}
	spec.RulesShadow = mode == "shadow"
	spec.ApprovalTimeout = time.Duration(approvalSecs) * time.Second
	spec.OnApprovalTimeout = tools.TimeoutAction(onTimeout)
	spec.ForbidEdits = edits == "forbidden"
}
