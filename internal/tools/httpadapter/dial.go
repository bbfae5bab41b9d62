package httpadapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// ErrBlockedAddress marks a dial refused because the resolved address is not a public one
// (loopback, private, link-local, unspecified, IPv4-mapped, CGNAT, multicast, documentation …).
var ErrBlockedAddress = errors.New("destination address is not allowed")

// guardian refuses every special-purpose address of the IANA registries. code.dny.dev/ssrf is
// used rather than net.IP's IsPrivate/IsLoopback/… because it carries the whole registry
// (CGNAT 100.64/10, 0/8, benchmarking, 6to4, NAT64, everything outside IPv6 global unicast, so
// IPv4-mapped IPv6 too), generated from IANA's data instead of a hand-kept list. Any port is
// allowed: APIs do live on 8443; the address, not the port, is what SSRF abuses.
var guardian = ssrf.New(ssrf.WithAnyPort())

// DialPolicy decides which addresses outbound calls may reach. The check runs in the dialer's
// Control hook on the address actually being connected to, after DNS resolution, so a name
// that resolves (or re-resolves: DNS rebinding) to a private address is refused.
type DialPolicy struct {
	// PrivateHosts are host names or IP literals (without port) the host's owner listed on
	// purpose. A listed IP literal is exempt from the check (the dial goes to exactly that
	// address); a listed name (localhost) may reach loopback addresses besides public ones, and
	// nothing else, so a listed name that resolves to 169.254.169.254 or 10/8 is still refused.
	// Matching is exact and case-insensitive.
	PrivateHosts []string
	// AllowPrivateNetwork lifts the check for every host (a webhook's allow_private_network).
	AllowPrivateNetwork bool
	// DialTimeout bounds connecting; 0 means 10 s.
	DialTimeout time.Duration
	// Resolver resolves names; nil uses the system resolver.
	Resolver *net.Resolver
}

// NewClient returns the client every adapter call uses: the dial policy above, no proxy from
// the environment (a proxy would dial on our behalf, past the check), and redirects returned
// as they are, never followed. It has no overall timeout: each request carries its own.
// Idle connections are kept per host up to idleConnsPerHost (net/http's default is 2), so calls
// made at once to one endpoint — a webhook receives every approved call of its tool — reuse
// their connections instead of dialing, checking and closing one each.
func NewClient(p DialPolicy) *http.Client {
	// exempt maps a listed host to whether it is an IP literal.
	exempt := map[string]bool{}
	for _, h := range p.PrivateHosts {
		n := normalizeHost(h)
		_, err := netip.ParseAddr(n)
		exempt[n] = err == nil
	}
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		d := &net.Dialer{Timeout: timeout, Resolver: p.Resolver}
		literal, listed := exempt[normalizeHost(host)]
		switch {
		case p.AllowPrivateNetwork || (listed && literal):
		case listed:
			d.Control = checkLoopbackOrPublic
		default:
			d.Control = checkAddress
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            dial,
			ForceAttemptHTTP2:      true,
			TLSHandshakeTimeout:    10 * time.Second,
			ResponseHeaderTimeout:  0,
			MaxIdleConns:           idleConns,
			MaxIdleConnsPerHost:    idleConnsPerHost,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// idleConns and idleConnsPerHost bound the idle connections a client keeps, in all and to one
// host; connections beyond them are closed when they go idle.
const (
	idleConns        = 64
	idleConnsPerHost = 16
)

// checkAddress is the dialer's Control hook.
func checkAddress(network, address string, c syscall.RawConn) error {
	if err := guardian.Safe(network, address, c); err != nil {
		return fmt.Errorf("%w: %w", ErrBlockedAddress, err)
	}
	return nil
}

// checkLoopbackOrPublic is the Control hook of a listed name: loopback (IPv4 or native IPv6,
// not IPv4-mapped) or a public address.
func checkLoopbackOrPublic(network, address string, c syscall.RawConn) error {
	if ap, err := netip.ParseAddrPort(address); err == nil {
		if ip := ap.Addr().WithZone(""); ip.IsLoopback() && !ip.Is4In6() {
			return nil
		}
	}
	return checkAddress(network, address, c)
}

// CheckAddr reports whether ip is a public address the dialer would connect to.
func CheckAddr(ip netip.Addr) error {
	if err := guardian.SafeAddr(ip); err != nil {
		return fmt.Errorf("%w: %w", ErrBlockedAddress, err)
	}
	return nil
}

// normalizeHost lower-cases a host, drops IPv6 brackets and a trailing dot, and writes IP
// literals in their canonical form so "::1" and "0::1" match.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.String()
	}
	return h
}

// IsPrivateLiteral reports whether host names a non-public target on its face: "localhost"
// (and its subdomains) or an IP literal the dialer would refuse. Listing such a host is an
// explicit decision to reach a private target; listing a public-looking name is not.
func IsPrivateLiteral(host string) bool {
	h := normalizeHost(host)
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && CheckAddr(ip) != nil
}
