// Command web is Parley's one binary: `web [serve]`, `web migrate`, `web user add`,
// `web token create`, `web audit verify|export`, `web healthcheck` (package app holds the
// commands; this is only the process around them).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"parley/internal/app"
)

func main() {
	// SIGINT or SIGTERM cancels ctx: serve shuts down gracefully within its timeout. A second
	// signal kills the process the default way, since NotifyContext's stop restores it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := app.Main(ctx, os.Args[1:], os.Getenv, app.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
