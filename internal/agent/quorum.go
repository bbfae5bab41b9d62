package agent

import "time"

// approval is one approver's approve of an M-of-N call.
type approval struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// approvalsNeeded is how many distinct approvals the call needs (at least 1).
func (c *call) approvalsNeeded() int { return max(1, c.needed) }

// approvalViews copies the approvals so far.
func (c *call) approvalViews() []ApprovalView {
	if len(c.approvals) == 0 {
		return nil
	}
	out := make([]ApprovalView, len(c.approvals))
	for i, a := range c.approvals {
		out[i] = ApprovalView(a)
	}
	return out
}
