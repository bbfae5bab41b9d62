// Command loadgen drives a running Parley server through its public JSON API, the way a webhook
// or a job would: N conversations at once, each a turn with a gated call (approved by the
// generator) and a turn with a question form (answered by the generator). It reports
// throughput, resolve latency, end-to-end turn latency, the server's RSS (from /metrics) and
// errors.
//
//	loadgen -url http://127.0.0.1:8080 -token $TOKEN -conversations 500
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg := Config{}
	flag.StringVar(&cfg.BaseURL, "url", "http://127.0.0.1:8080", "server base URL")
	flag.StringVar(&cfg.Token, "token", os.Getenv("PARLEY_TOKEN"), "API token (or PARLEY_TOKEN)")
	flag.IntVar(&cfg.Conversations, "conversations", 50, "conversations run at once")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.DurationVar(&cfg.Poll, "poll", 20*time.Millisecond, "how often a conversation's state is polled")
	flag.Parse()
	if cfg.Token == "" {
		fmt.Fprintln(os.Stderr, "loadgen: an API token is required (-token or PARLEY_TOKEN)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	rep.Print(os.Stdout)
	if rep.Errors > 0 {
		os.Exit(1)
	}
}
