package browsertest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// axeSource is axe-core's script, installed from npm by scripts/ensure-axe.sh (which pins its
// version) on first use.
var axeSource = sync.OnceValues(func() (string, error) {
	root, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for !fileExists(filepath.Join(root, "go.mod")) {
		parent := filepath.Dir(root)
		if parent == root {
			return "", os.ErrNotExist
		}
		root = parent
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "ensure-axe.sh")).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", &axeError{err: err, stderr: string(ee.Stderr)}
		}
		return "", err
	}
	b, err := os.ReadFile(strings.TrimSpace(string(out)))
	return string(b), err
})

type axeError struct {
	err    error
	stderr string
}

func (e *axeError) Error() string { return "scripts/ensure-axe.sh: " + e.err.Error() + "\n" + e.stderr }

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// axeViolation is one rule axe found broken, with the elements that break it.
type axeViolation struct {
	ID, Impact, Help string
	Nodes            []string
}

// checkA11y runs axe-core on the page as it is and fails the test on every serious or critical
// violation (WCAG 2.x A and AA rules and axe's best practices).
func (tb *tab) checkA11y(t *testing.T, page string) {
	t.Helper()
	began := time.Now()
	defer func() { t.Logf("axe-core on %s: %v", page, time.Since(began).Round(time.Millisecond)) }()
	src, err := axeSource()
	if err != nil {
		t.Fatalf("axe-core: %v", err)
	}
	if !eval[bool](tb, `typeof window.axe === "object"`) {
		eval[bool](tb, src+"\n;true")
	}
	eval[bool](tb, `(window.__axe = undefined, axe.run(document, {resultTypes: ["violations"]}).then(r => {
		window.__axe = JSON.stringify(r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v =>
			({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ") + " " + n.html.slice(0, 160))})));
	}, e => { window.__axe = JSON.stringify([{id: "axe-error", impact: "critical", help: String(e), nodes: []}]); }), true)`)
	tb.until(`typeof window.__axe === "string"`)
	var vs []axeViolation
	if err := json.Unmarshal([]byte(eval[string](tb, `window.__axe`)), &vs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("accessibility (%s): %s %s: %s\n\t%s", page, v.Impact, v.ID, v.Help, strings.Join(v.Nodes, "\n\t"))
	}
}
