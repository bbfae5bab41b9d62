package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"parley/internal/store/pgtest"
)

// TestFromEnv: defaults, and every malformed variable is refused with its name.
func TestFromEnv(t *testing.T) {
	c, err := FromEnv(func(string) string { return "" })
	if err != nil || c.Addr != "127.0.0.1:8080" || c.DataDir != "./data" || c.Model != "demo" || c.Production {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct{ k, v, want string }{
		{"PARLEY_ENV", "staging", "PARLEY_ENV"},
		{"PARLEY_MODEL", "gpt-4", "PARLEY_MODEL"},
		{"PARLEY_MODEL", "openai:", "PARLEY_MODEL"},
		{"PARLEY_MODEL", "mistral:large", "PARLEY_MODEL"},
		{"PARLEY_MESSAGES_PER_MINUTE", "-1", "PARLEY_MESSAGES_PER_MINUTE"},
		{"PARLEY_API_BURST", "many", "PARLEY_API_BURST"},
		{"PARLEY_SHUTDOWN_TIMEOUT", "5", "PARLEY_SHUTDOWN_TIMEOUT"},
		{"PARLEY_DEMO_PACE", "-1ms", "PARLEY_DEMO_PACE"},
		{"PARLEY_DEMO_PACE", "fast", "PARLEY_DEMO_PACE"},
		{"PARLEY_INBOX_CLAIM_TTL", "600", "PARLEY_INBOX_CLAIM_TTL"},
	} {
		_, err := FromEnv(func(k string) string {
			if k == tc.k {
				return tc.v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v", tc.k, tc.v, err)
		}
	}
	c, err = FromEnv(func(k string) string {
		return map[string]string{"PARLEY_ENV": "production", "PARLEY_MODEL": "anthropic:claude-x", "PARLEY_API_PER_MINUTE": "30"}[k]
	})
	if err != nil || !c.Production || c.APIPerMinute != 30 || c.DemoPace != nil {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := FromEnv(func(k string) string { return map[string]string{"PARLEY_DEMO_PACE": "0"}[k] }); err != nil || c.DemoPace == nil || *c.DemoPace != 0 {
		t.Fatalf("PARLEY_DEMO_PACE=0: %+v %v", c, err)
	}
	if c, err := FromEnv(func(k string) string { return map[string]string{"PARLEY_INBOX_CLAIM_TTL": "15m"}[k] }); err != nil || c.InboxClaimTTL != 15*time.Minute {
		t.Fatalf("PARLEY_INBOX_CLAIM_TTL=15m: %+v %v", c, err)
	}
	if c, err := FromEnv(func(k string) string { return map[string]string{"PARLEY_TEST_TOOLS": "true"}[k] }); err != nil || c.TestTools == nil || !*c.TestTools {
		t.Fatalf("PARLEY_TEST_TOOLS=true: %+v %v", c, err)
	}
	if _, err := FromEnv(func(k string) string { return map[string]string{"PARLEY_TEST_TOOLS": "maybe"}[k] }); err == nil {
		t.Fatal("PARLEY_TEST_TOOLS=maybe was accepted")
	}
	if p, m, _ := c.model(); p != "anthropic" || m != "claude-x" {
		t.Fatalf("model %s %s", p, m)
	}
}

// TestCommands: the user and token commands, and their refusals, each one line on stderr, on
// both stores.
func TestCommands(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		testCommands(t, func(k string) string { return map[string]string{"PARLEY_DATA_DIR": dir}[k] })
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.NewURL(t)
		testCommands(t, func(k string) string { return map[string]string{"DATABASE_URL": url}[k] })
	})
}

func testCommands(t *testing.T, getenv func(string) string) {
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, getenv, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut})
		return code, out.String(), errOut.String()
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		out   string
	}{
		{"", []string{"migrate"}, 0, "migrations applied"},
		{"pw\n", []string{"user", "add", "--name", "ada", "--role", "admin"}, 1, "--password-stdin"},
		{"long enough\n", []string{"user", "add", "--name", "ada", "--role", "root", "--password-stdin"}, 1, "--role must be"},
		{"short\n", []string{"user", "add", "--name", "ada", "--password-stdin"}, 1, "8 to 72"},
		{"long enough\n", []string{"user", "add", "--name", "ada lovelace", "--password-stdin"}, 1, "--name: a name has 1 to 64"},
		{"long enough\n", []string{"user", "add", "--name", "ada", "--role", "admin", "--password-stdin"}, 0, "created user ada (admin"},
		{"long enough\n", []string{"user", "add", "--name", "ada", "--password-stdin"}, 1, "exists already"},
		{"", []string{"token", "create", "--user", "nobody"}, 1, `no user named "nobody"`},
		{"", []string{"token", "create", "--user", "ada"}, 0, "pt_"},
		{"", []string{"token", "create", "--user", "ada", "--label", " "}, 1, "--label: a token needs a name"},
		{"", []string{"frobnicate"}, 1, `unknown command "frobnicate"`},
		{"", []string{"help"}, 0, "web user add"},
	} {
		code, out, errOut := run(tc.stdin, tc.args...)
		text := out + errOut
		if code != tc.code || !strings.Contains(text, tc.out) {
			t.Errorf("%v: %d %q, want %d and %q", tc.args, code, text, tc.code, tc.out)
		}
		if code == 1 && !strings.HasPrefix(errOut, "web: ") && !strings.Contains(errOut, "usage:") {
			t.Errorf("%v: stderr %q", tc.args, errOut)
		}
	}
}

// TestBadToolsFileStopsStartup: serve refuses a tools file with problems and lists each by path.
func TestBadToolsFileStopsStartup(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/tools.json"
	bad := `{"tools":[{"name":"x","type":"webhook","description":"d","parameters":{"type":"object"},"url":"ftp://nope"},{"type":"human"}]}`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PARLEY_DATA_DIR": dir, "PARLEY_TOOLS": path, "PARLEY_ADDR": "127.0.0.1:0"}
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	if code != 1 || !strings.Contains(errOut.String(), "/tools/0") || !strings.Contains(errOut.String(), "/tools/1") || strings.Contains(out.String(), "listening") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errOut.String())
	}
}
