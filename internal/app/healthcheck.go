package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheckTimeout bounds `web healthcheck`; Docker's HEALTHCHECK --timeout is 3s.
const healthcheckTimeout = 2 * time.Second

// Healthcheck GETs /healthz of the server listening on addr (PARLEY_ADDR) and returns nil on 200.
// A wildcard or empty host (0.0.0.0, ::, ":8080") is probed on the loopback address, since that
// is where a probe inside the container reaches the server.
func Healthcheck(ctx context.Context, addr string, timeout time.Duration) error {
	target, err := probeAddr(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	// A transport of its own: no proxy from the environment, no idle connections left behind.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", target, res.StatusCode)
	}
	return nil
}

// probeAddr turns a listen address into one to dial.
func probeAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("PARLEY_ADDR %q is not host:port: %w", addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
