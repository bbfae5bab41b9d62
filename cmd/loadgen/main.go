// Command loadgen drives a running Parley server through its public JSON API and event streams
// (package internal/loadgen): N conversations at once, each a turn with a gated call approved by
// the generator and a turn with a question form answered by it. It reports throughput, resolve
// latency, end-to-end turn latency, the server's RSS (from /metrics) and errors; with -floor-db,
// also bare single-row INSERT commits on that database measured during the same run.
//
//	loadgen -url http://127.0.0.1:8080 -token $TOKEN -conversations 500 -floor-db $DATABASE_URL
//
// It exits 1 when any conversation failed.
//
// With -workload approvals it runs issue 18's workload instead, the one the peer benchmarks
// serve, end to end: it creates a database on -pg, starts the -web binary on it with a fake
// OpenAI-compatible streaming model and a webhook receiver (both in this process), makes -n
// conversations await a gated webhook call, approves them with -c clients and prints the
// peers' figures (see scripts/approvals.sh and docs/benchmarks.md):
//
//	loadgen -workload approvals -web ./web -pg postgres://postgres@127.0.0.1:5432/postgres -n 200 -c 16
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
	workload := flag.String("workload", "turns", "turns (the load run) or approvals (issue 18's workload; needs -web and -pg)")
	web := flag.String("web", "", "approvals: the Parley binary to start")
	pg := flag.String("pg", os.Getenv("TEST_DATABASE_URL"), "approvals: PostgreSQL admin URL (a fresh database per run; default TEST_DATABASE_URL)")
	n := flag.Int("n", 200, "approvals: conversations")
	c := flag.Int("c", 16, "approvals: concurrent clients")
	pool := flag.Int("pool", 0, "approvals: the server's pool_max_conns (0: pgxpool's default)")
	floorN := flag.Int("floor-n", 500, "approvals: bare INSERT commits for the floor (one connection, before the server starts)")
	pprofDir := flag.String("pprof-dir", "", "approvals: write the server's phase-2 CPU profile and allocation profiles here (the binary must be built with -tags pprof)")
	flag.Parse()
	if *workload == "approvals" {
		approvals(loadgen.ApprovalsConfig{AdminURL: *pg, WebBinary: *web, N: *n, C: *c, Pool: *pool, FloorN: *floorN,
			Timeout: cfg.Timeout, PprofDir: *pprofDir, Log: os.Stderr})
		return
	}
	if *workload != "turns" {
		fmt.Fprintln(os.Stderr, "loadgen: -workload must be turns or approvals")
		os.Exit(2)
	}
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

func approvals(cfg loadgen.ApprovalsConfig) {
	if cfg.WebBinary == "" || cfg.AdminURL == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -workload approvals needs -web and -pg (or TEST_DATABASE_URL)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := loadgen.RunApprovals(ctx, cfg)
	rep.Print(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	if !rep.OK {
		os.Exit(1)
	}
}
