package browsertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestHooksJSParsesAndAvoidsEval checks static/js/hooks.js with Node's parser (the machine's
// Node.js; there is no build step to catch a syntax error) and refuses the constructs the CSP
// would block or that turn data into code.
func TestHooksJSParsesAndAvoidsEval(t *testing.T) {
	root := repoRoot(t)
	path := filepath.Join(root, "static", "js", "hooks.js")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("Node.js is needed to check static/js/hooks.js (it is part of the machine image)")
	}
	if out, err := exec.Command(node, "--check", path).CombinedOutput(); err != nil {
		t.Fatalf("node --check hooks.js: %v\n%s", err, out)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`\beval\s*\(`),
		regexp.MustCompile(`new\s+Function\s*\(`),
		regexp.MustCompile(`setTimeout\s*\(\s*["'\x60]`),
		regexp.MustCompile(`document\.write`),
		regexp.MustCompile(`\.insertAdjacentHTML`),
		regexp.MustCompile(`\bform\.(action|dataset|reset|requestSubmit|submit|querySelector|elements)\b`),
	} {
		if loc := bad.FindIndex(src); loc != nil {
			t.Errorf("hooks.js uses %q at byte %d", bad.String(), loc[0])
		}
	}
}
