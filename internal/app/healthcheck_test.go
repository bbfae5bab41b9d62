package app

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbeAddr(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"0.0.0.0:8080", "127.0.0.1:8080", ""},
		{":8080", "127.0.0.1:8080", ""},
		{"[::]:8080", "[::1]:8080", ""},
		{"127.0.0.1:9000", "127.0.0.1:9000", ""},
		{"parley.internal:80", "parley.internal:80", ""},
		{"8080", "", "not host:port"},
	} {
		got, err := probeAddr(tc.in)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("probeAddr(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestHealthcheckCommand: `web healthcheck` exits 0 against a running app addressed as the
// image does (0.0.0.0:port), and 1 with one line on stderr once the app is gone.
func TestHealthcheckCommand(t *testing.T) {
	r := start(t, "")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(r.url, "http://"))
	getenv := func(k string) string {
		if k == "PARLEY_ADDR" {
			return "0.0.0.0:" + port
		}
		return ""
	}
	check := func() (int, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), []string{"healthcheck"}, getenv, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
		return code, errOut.String()
	}
	if code, errOut := check(); code != 0 {
		t.Fatalf("healthy app: exit %d, %s", code, errOut)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if code, errOut := check(); code != 1 || !strings.HasPrefix(errOut, "web: healthcheck:") {
		t.Fatalf("stopped app: exit %d, %q", code, errOut)
	}
}

// TestHealthcheckStatusAndTimeout: a 503 is unhealthy, and a server that does not answer is
// given up on after the timeout.
func TestHealthcheckStatusAndTimeout(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(release)
	addr := strings.TrimPrefix(ts.URL, "http://")
	began := time.Now()
	err := Healthcheck(context.Background(), addr, 100*time.Millisecond)
	if err == nil || time.Since(began) > 5*time.Second {
		t.Fatalf("hanging server: %v after %s", err, time.Since(began))
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if err := Healthcheck(context.Background(), strings.TrimPrefix(down.URL, "http://"), time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: %v", err)
	}
}
