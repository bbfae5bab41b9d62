package httpadapter

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"parley/internal/fault"
	"sync/atomic"
	"testing"
)

// TestDialerRefusesPrivateTargets runs every SSRF case against a live server on 127.0.0.1: the
// only way a refused request could still reach it is through a loopback alias, so a zero hit
// count proves the dialer stopped it.
func TestDialerRefusesPrivateTargets(t *testing.T) {
	var hits atomic.Int32
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	port := mustURL(t, srv.URL).Port()
	strict := NewClient(DialPolicy{})
	t.Cleanup(strict.CloseIdleConnections)
	h := &HTTP{Client: strict}
	targets := []string{
		"http://127.0.0.1:" + port + "/",
		"http://localhost:" + port + "/", // a name that resolves to loopback
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://0.0.0.0:" + port + "/",
		"http://127.1.2.3:" + port + "/",
		"http://10.1.2.3/",
		"http://172.16.0.1/",
		"http://192.168.1.1/",
		"http://169.254.169.254/latest/meta-data/",
		"http://100.64.0.1/",                              // CGNAT
		"http://224.0.0.1/",                               // multicast
		"http://[fe80::1]/",                               // link-local
		"http://[fc00::1]/",                               // unique local
		"http://[::ffff:7f00:1]:" + port + "/",            // mapped loopback, hex form
		"http://[0:0:0:0:0:ffff:127.0.0.1]:" + port + "/", // mapped loopback, long form
		"http://[::127.0.0.1]:" + port + "/",              // IPv4-compatible (deprecated)
		"http://[64:ff9b::7f00:1]:" + port + "/",          // NAT64 of loopback
		"http://[2002:7f00:1::1]:" + port + "/",           // 6to4 of loopback
		"http://[::]:" + port + "/",                       // unspecified
	}
	for _, target := range targets {
		t.Run(target, func(t *testing.T) {
			_, aerr := h.Do(context.Background(), Request{URL: target}, CallContext{})
			if aerr == nil || aerr.Kind != fault.KindBlockedHost || aerr.Retryable {
				t.Fatalf("error = %+v, want non-retryable blocked_host", aerr)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("a refused target reached the server %d times", n)
	}
}

// TestObscureIPv4SpellingsNeverReachLoopback: decimal, octal, hex and short forms of 127.0.0.1
// are not IP literals to Go, so they are looked up as names; whichever resolver answers, the
// request must fail and the loopback server must not be reached.
func TestObscureIPv4SpellingsNeverReachLoopback(t *testing.T) {
	var hits atomic.Int32
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	port := mustURL(t, srv.URL).Port()
	c := NewClient(DialPolicy{})
	t.Cleanup(c.CloseIdleConnections)
	for _, host := range []string{"2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1", "0x7f000001"} {
		_, aerr := (&HTTP{Client: c}).Do(context.Background(), Request{URL: "http://" + host + ":" + port + "/"}, CallContext{})
		if aerr == nil {
			t.Errorf("%s: request succeeded", host)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("an obscure spelling reached the loopback server %d times", n)
	}
}

func TestDialerExemptions(t *testing.T) {
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	port := mustURL(t, srv.URL).Port()
	tests := []struct {
		name   string
		policy DialPolicy
		target string
		ok     bool
	}{
		{"listed IP literal", DialPolicy{PrivateHosts: []string{"127.0.0.1"}}, "http://127.0.0.1:" + port, true},
		{"listed name", DialPolicy{PrivateHosts: []string{"LOCALHOST."}}, "http://localhost:" + port, true},
		{"listing one host does not exempt another", DialPolicy{PrivateHosts: []string{"localhost"}}, "http://127.0.0.1:" + port, false},
		{"listing the name does not exempt the mapped form", DialPolicy{PrivateHosts: []string{"127.0.0.1"}}, "http://[::ffff:127.0.0.1]:" + port, false},
		{"allow private network", DialPolicy{AllowPrivateNetwork: true}, "http://127.0.0.1:" + port, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClient(tc.policy)
			t.Cleanup(c.CloseIdleConnections)
			_, aerr := (&HTTP{Client: c}).Do(context.Background(), Request{URL: tc.target}, CallContext{})
			if tc.ok != (aerr == nil) {
				t.Fatalf("error = %v, want ok=%v", aerr, tc.ok)
			}
			if !tc.ok && aerr.Kind != fault.KindBlockedHost {
				t.Fatalf("kind = %s, want blocked_host", aerr.Kind)
			}
		})
	}
}

func TestNoProxyFromEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://10.9.9.9:3128")
	t.Setenv("HTTPS_PROXY", "http://10.9.9.9:3128")
	c := NewClient(DialPolicy{})
	if tr := c.Transport.(*http.Transport); tr.Proxy != nil {
		t.Fatal("the transport must not take a proxy from the environment")
	}
}

func TestIsPrivateLiteral(t *testing.T) {
	tests := map[string]bool{
		"localhost": true, "api.localhost": true, "127.0.0.1": true, "[::1]": true, "::ffff:127.0.0.1": true,
		"10.0.0.1": true, "169.254.169.254": true, "100.64.1.1": true,
		"api.example.test": false, "93.184.216.34": false, "2606:4700::1111": false, "localhost.example.test": false,
	}
	for host, want := range tests {
		if got := IsPrivateLiteral(host); got != want {
			t.Errorf("IsPrivateLiteral(%q) = %v, want %v", host, got, want)
		}
	}
	if err := CheckAddr(netip.MustParseAddr("8.8.8.8")); err != nil {
		t.Errorf("public address refused: %v", err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
