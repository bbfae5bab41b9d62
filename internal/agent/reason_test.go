package agent

import (
	"errors"
	"strings"
	"testing"

	"parley/internal/fault"
	"parley/internal/store"
)

// A decision's reason is bounded (MaxReasonBytes) for one decision as for a bulk one: a longer
// reason is refused as invalid_args at /reason, before anything is staged; one at the bound is
// taken.
func TestResolveBoundsTheReason(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	long := strings.Repeat("é", MaxReasonBytes/2) + "x" // MaxReasonBytes+1 bytes
	err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "deny", Reason: long}})
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Kind != fault.KindInvalidArgs || len(fe.Problems) != 1 || fe.Problems[0].Path != "/reason" {
		t.Fatalf("a %d-byte reason: %v (%+v), want invalid_args at /reason", len(long), err, fe)
	}
	if !a.ready.empty() || len(a.ready.effects) != 0 || len(a.ready.follow) != 0 {
		t.Fatalf("a refusal staged %+v", a.ready.batch)
	}
	if cl := a.st.calls["c1"]; cl.status != store.CallAwaiting {
		t.Fatalf("status %q", cl.status)
	}
	atBound := strings.Repeat("n", MaxReasonBytes)
	if err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "deny", Reason: atBound}}); err != nil {
		t.Fatalf("a reason of exactly %d bytes: %v", MaxReasonBytes, err)
	}
	if cl := a.st.calls["c1"]; cl.status != store.CallDenied {
		t.Fatalf("status %q", cl.status)
	}
}
