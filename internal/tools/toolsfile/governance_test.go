package toolsfile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"parley/internal/tools"
)

// TestGovernanceExampleLoads loads examples/governance.json as the app does (no credentials, no
// adapters: it starts as it is) and checks every governance key reached its tool.
func TestGovernanceExampleLoads(t *testing.T) {
	ts, err := Load("../../../examples/governance.json", Env{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	by := map[string]*tools.Tool{}
	for _, tl := range ts {
		by[tl.Name()] = tl
	}
	tf := by["transfer_funds"]
	if tf == nil || len(tf.Rules()) != 4 || tf.Rules()[0].Count != 2 || tf.Rules()[0].Approvers != tools.ByReviewer ||
		tf.Rules()[1].Approvers != tools.ByReviewer || tf.Rules()[3].Action != tools.RuleDeny || tf.ApprovalTimeout() != time.Hour ||
		tf.OnApprovalTimeout() != tools.TimeoutEscalate || tf.Timeout() != 20*time.Second || tf.RulesShadow() {
		t.Fatalf("transfer_funds = %+v", tf)
	}
	if si := by["send_invoice"]; si == nil || !si.RulesShadow() || si.OnApprovalTimeout() != tools.TimeoutDeny {
		t.Fatalf("send_invoice = %+v", si)
	}
	if sl := by["share_location"]; sl == nil || len(sl.Rules()) != 2 {
		t.Fatalf("share_location = %+v", sl)
	}
}

// TestGovernanceRefusals: a bad rule or governance key stops start-up with its path, like every
// other problem of the file.
func TestGovernanceRefusals(t *testing.T) {
	hook := func(extra string) string {
		return `{"name":"hook","type":"webhook","description":"d",` + params + `,"url":"https://hooks.example.test/x","secret_env":"TICKET_WEBHOOK_SECRET"` + extra + `}`
	}
	cases := []struct {
		name, extra, path, msg string
	}{
		{"CEL syntax", `,"rules":[{"when":"true","action":"allow"},{"when":"args.city ==","action":"deny"}]`, "/tools/0/rules/1", "does not compile"},
		{"not boolean", `,"rules":[{"when":"args.city","action":"deny"}]`, "/tools/0/rules/0", "must be boolean"},
		{"unknown variable", `,"rules":[{"when":"owner.name == 'x'","action":"deny"}]`, "/tools/0/rules/0", "undeclared reference"},
		{"unknown action", `,"rules":[{"when":"true","action":"maybe"}]`, "/tools/0/rules/0/action", ""},
		{"reason on allow", `,"rules":[{"when":"true","action":"allow","reason":"x"}]`, "/tools/0/rules/0", "only a deny rule"},
		{"M-of-N owners", `,"approvers":{"role":"owner","count":2}`, "/tools/0/approvers", "owner never counts"},
		{"count too large", `,"approvers":{"role":"reviewer","count":11}`, "/tools/0/approvers", ""},
		{"shadow without rules", `,"rules_mode":"shadow"`, "/tools/0/rules_mode", "needs rules"},
		{"bad timeout action", `,"on_approval_timeout":"later"`, "/tools/0/on_approval_timeout", ""},
		{"bad edits", `,"edits":"sometimes"`, "/tools/0/edits", ""},
	}
	for _, c := range cases {
		_, err := Parse(file(hook(c.extra)), env(t))
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("%s: err = %v, want a file error", c.name, err)
			continue
		}
		ok := false
		for _, p := range fe.Problems {
			if strings.HasPrefix(p.Path, c.path) && strings.Contains(p.Message, c.msg) && p.Tool == "hook" {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: problems %+v, want one at %s containing %q", c.name, fe.Problems, c.path, c.msg)
		}
	}
	// A human tool may be allowed or denied by a rule, never asked about.
	human := `{"name":"q","type":"human","description":"d",` + params + `,"rules":[{"when":"true","action":"ask"}]}`
	if _, err := Parse(file(human), env(t)); err == nil || !strings.Contains(err.Error(), "/tools/0/rules/0/action") {
		t.Errorf("ask on a human tool: %v", err)
	}
}

func TestEditsForbidden(t *testing.T) {
	hook := func(extra string) string {
		return `{"name":"hook","type":"webhook","description":"d",` + params + `,"url":"https://hooks.example.test/x","secret_env":"TICKET_WEBHOOK_SECRET","approval":"requires_approval"` + extra + `}`
	}
	for _, c := range []struct {
		extra     string
		forbidden bool
	}{{"", false}, {`,"edits":"allowed"`, false}, {`,"edits":"forbidden"`, true}} {
		ts, err := Parse(file(hook(c.extra)), env(t))
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		if got := ts[0].EditsForbidden(); got != c.forbidden {
			t.Errorf("%q: EditsForbidden() = %v, want %v", c.extra, got, c.forbidden)
		}
	}
}
