// Command loadgen drives a running Parley server through its public JSON API and event streams
// (package internal/loadgen): N conversations at once, each a turn with a gated call approved by
// the generator and a turn with a question form answered by it. It reports throughput, resolve
// latency, end-to-end turn latency, the server's RSS (from /metrics) and errors; with -floor-db,
// also bare single-row INSERT commits on that database measured during the same run.
//
//	loadgen -url http://127.0.0.1:8080 -token $TOKEN -conversations 500 -floor-db $DATABASE_URL
//
// It exits 1 when any conversation failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"parley/internal/loadgen"
)

func main() {
	cfg := loadgen.Config{}
	flag.StringVar(&cfg.BaseURL, "url", "http://127.0.0.1:8080", "server base URL")
	flag.StringVar(&cfg.Token, "token", os.Getenv("PARLEY_TOKEN"), "API token (or PARLEY_TOKEN)")
	flag.IntVar(&cfg.Conversations, "conversations", 50, "conversations run at once")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up after this long")
	floorDB := flag.String("floor-db", "", "PostgreSQL URL (the server's database) to measure bare INSERT commits on: a burst at -conversations concurrency before the load, and paced workers during it")
	floorWorkers := flag.Int("floor-workers", 16, "concurrent bare-commit workers")
	floorPace := flag.Duration("floor-pace", 20*time.Millisecond, "pause between one worker's commits")
	flag.Parse()
	if cfg.Token == "" {
		fmt.Fprintln(os.Stderr, "loadgen: an API token is required (-token or PARLEY_TOKEN)")
		os.Exit(2)
	}
	if *floorDB != "" {
		cfg.FloorBurst = loadgen.PostgresBurstFloor(*floorDB, len(loadgen.Turns))
		cfg.Floor = loadgen.PostgresFloor(*floorDB, *floorWorkers, *floorPace)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	rep.Print(os.Stdout)
	if rep.Errors > 0 {
		os.Exit(1)
	}
}
