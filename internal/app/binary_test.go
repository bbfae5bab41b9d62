package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// TestMain removes the binary the tests built and fails the package when a started App left a
// goroutine behind (test clients' idle keep-alive connections aside).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if code == 0 {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// buildBinary compiles cmd/web once for the tests that run it, exactly as the Dockerfile and
// `make docker-binary` do (static, trimmed paths): the tests run the binary that ships, and
// the build reuses the compiled packages `make test` has just cached for docker-binary
// instead of compiling every dependency once more in a configuration of its own.
func buildBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "parley-web-bin"); binErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(binDir, "web"), "parley/cmd/web")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "web")
}

// TestUnreachableDatabase: the binary exits non-zero within seconds with one line naming the
// host and the database, never the password, and no stack trace.
func TestUnreachableDatabase(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{{}, {"serve"}, {"migrate"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		// Configured as a deployment is (its keys given), so the one line is the failure's.
		cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://parley:s3cret-pw@127.0.0.1:1/parleydb?sslmode=disable",
			"PARLEY_ADDR=127.0.0.1:0", "PARLEY_DATA_DIR="+t.TempDir(), "PARLEY_CLUSTER_KEY="+testClusterKey, "PARLEY_AUDIT_KEY="+testAuditKey)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		began := time.Now()
		err := cmd.Run()
		took := time.Since(began)
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 {
			t.Fatalf("%v: exit %v", args, err)
		}
		msg := stderr.String()
		if took > 10*time.Second {
			t.Errorf("%v: took %v", args, took)
		}
		if strings.Count(strings.TrimSpace(msg), "\n") != 0 || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "parleydb") {
			t.Errorf("%v: stderr is not one line naming host and database: %q", args, msg)
		}
		if strings.Contains(msg+stdout.String(), "s3cret-pw") || strings.Contains(msg, "goroutine") || strings.Contains(msg, "panic") {
			t.Errorf("%v: leaked the password or a trace: %q", args, msg)
		}
	}
}

// TestBinaryServesAndStopsOnSIGTERM: the binary prints where it listens, answers /healthz,
// and exits 0 soon after SIGTERM.
func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PARLEY_ADDR=127.0.0.1:0", "PARLEY_DATA_DIR="+t.TempDir(), "DATABASE_URL=", "PARLEY_MODEL=demo")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "parley listening on http://127.0.0.1:") {
		_ = cmd.Process.Kill()
		t.Fatalf("first line %q: %v (%s)", line, err, stderr.String())
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "parley listening on "))
	res, err := httpGet(url + "/healthz")
	if err != nil || res != 200 {
		_ = cmd.Process.Kill()
		t.Fatalf("healthz: %d %v", res, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("still running 10 s after SIGTERM")
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Fatalf("no shutdown log: %s", stderr.String())
	}
}
