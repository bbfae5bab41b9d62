package httpadapter

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"parley/internal/fault"
	"parley/internal/tools"
)

// fakeDNS is a resolver that answers every A query with addr, served over in-memory pipes (the
// Go resolver speaks TCP framing on a non-packet conn). It lets a test give a public-looking
// name a private address, as a DNS-rebinding attacker would.
func fakeDNS(t *testing.T, addr [4]byte) *net.Resolver {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			client, server := net.Pipe()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer server.Close()
				for {
					var n [2]byte
					if _, err := io.ReadFull(server, n[:]); err != nil {
						return
					}
					msg := make([]byte, binary.BigEndian.Uint16(n[:]))
					if _, err := io.ReadFull(server, msg); err != nil {
						return
					}
					var q dnsmessage.Message
					if err := q.Unpack(msg); err != nil || len(q.Questions) == 0 {
						return
					}
					resp := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true}, Questions: q.Questions}
					if q.Questions[0].Type == dnsmessage.TypeA {
						resp.Answers = []dnsmessage.Resource{{
							Header: dnsmessage.ResourceHeader{Name: q.Questions[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
							Body:   &dnsmessage.AResource{A: addr},
						}}
					}
					out, err := resp.Pack()
					if err != nil {
						return
					}
					binary.BigEndian.PutUint16(n[:], uint16(len(out)))
					if _, err := server.Write(append(n[:], out...)); err != nil {
						return
					}
				}
			}()
			return client, nil
		},
	}
}

// TestDNSRebindingRefused: an allowed, public-looking name that resolves to loopback is refused
// at dial time, both for a plain adapter client and for an http.request action listing it.
func TestDNSRebindingRefused(t *testing.T) {
	var hits sync.Mutex
	count := 0
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { hits.Lock(); count++; hits.Unlock() })
	port := mustURL(t, srv.URL).Port()
	resolver := fakeDNS(t, [4]byte{127, 0, 0, 1})
	target := "http://rebind.example.test:" + port + "/"

	c := NewClient(DialPolicy{Resolver: resolver})
	t.Cleanup(c.CloseIdleConnections)
	_, aerr := (&HTTP{Client: c}).Do(context.Background(), Request{URL: target}, CallContext{})
	if aerr == nil || aerr.Kind != fault.KindBlockedHost {
		t.Fatalf("rebinding name: %+v, want blocked_host", aerr)
	}

	opts := ActionOptions{AllowedHosts: []string{"rebind.example.test"}}
	p := DialPolicyFor(opts)
	p.Resolver = resolver
	opts.Client = NewClient(p)
	t.Cleanup(opts.Client.CloseIdleConnections)
	a, err := NewAction(map[string]any{"method": "GET", "url": target}, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Func()(context.Background(), tools.Call{ToolCallID: "c"}, nil)
	if te, ok := err.(*fault.Error); !ok || te.Kind != fault.KindBlockedHost || te.Retryable {
		t.Fatalf("action: %v, want non-retryable blocked_host", err)
	}

	// With the private network allowed on purpose, the same name connects: the resolver works.
	p.AllowPrivateNetwork = true
	ok := NewClient(p)
	t.Cleanup(ok.CloseIdleConnections)
	if _, aerr := (&HTTP{Client: ok}).Do(context.Background(), Request{URL: target}, CallContext{}); aerr != nil {
		t.Fatalf("allowed private network: %v", aerr)
	}
	hits.Lock()
	defer hits.Unlock()
	if count != 1 || !strings.HasPrefix(target, "http://rebind") {
		t.Fatalf("server hits = %d, want exactly the one allowed request", count)
	}
}

// TestListedNameReachesOnlyLoopback: listing a name exempts it for loopback only, so a listed
// name whose DNS answer is the cloud metadata address (or any other private one) is refused,
// while the same name answering 127.0.0.1 connects.
func TestListedNameReachesOnlyLoopback(t *testing.T) {
	var hits sync.Mutex
	count := 0
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { hits.Lock(); count++; hits.Unlock() })
	port := mustURL(t, srv.URL).Port()
	target := "http://intranet.example.test:" + port + "/"
	for _, tc := range []struct {
		name string
		addr [4]byte
		ok   bool
	}{
		{"loopback answer", [4]byte{127, 0, 0, 1}, true},
		{"metadata answer", [4]byte{169, 254, 169, 254}, false},
		{"private answer", [4]byte{10, 0, 0, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClient(DialPolicy{PrivateHosts: []string{"intranet.example.test"}, Resolver: fakeDNS(t, tc.addr)})
			t.Cleanup(c.CloseIdleConnections)
			_, aerr := (&HTTP{Client: c}).Do(context.Background(), Request{URL: target}, CallContext{})
			if tc.ok != (aerr == nil) {
				t.Fatalf("error = %v, want ok=%v", aerr, tc.ok)
			}
			if !tc.ok && aerr.Kind != fault.KindBlockedHost {
				t.Fatalf("kind = %s, want blocked_host", aerr.Kind)
			}
		})
	}
	hits.Lock()
	defer hits.Unlock()
	if count != 1 {
		t.Fatalf("server hits = %d, want the one loopback request", count)
	}
}
