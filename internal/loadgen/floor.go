package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// floorTable is the bare table both floors write, created for the measurement and dropped after.
const floorTable = `CREATE TABLE loadgen_floor (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id text NOT NULL, data json)`

// PostgresBurstFloor returns a Config.FloorBurst: concurrency goroutines released at once,
// each committing `each` bare single-row INSERTs back to back through a pool with pgxpool's
// defaults (the server's store pool; pool_max_conns in the URL changes both alike). This is the
// floor at the concurrency the conversations resolve with, since they run in step.
func PostgresBurstFloor(databaseURL string, each int) func(ctx context.Context, concurrency int) ([]time.Duration, error) {
	return func(ctx context.Context, concurrency int) (_ []time.Duration, err error) {
		pool, err := pgxpool.New(ctx, databaseURL)
		if err != nil {
			return nil, fmt.Errorf("open floor database: %w", err)
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, floorTable); err != nil {
			return nil, fmt.Errorf("create floor table: %w", err)
		}
		defer func() {
			cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, derr := pool.Exec(cleanup, `DROP TABLE loadgen_floor`); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop floor table: %w", derr))
			}
		}()
		// Warm the pool as the server's is warm.
		if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		type result struct {
			samples []time.Duration
			err     error
		}
		release := make(chan struct{})
		results := make(chan result, concurrency)
		for w := 0; w < concurrency; w++ {
			go func() {
				var r result
				defer func() { results <- r }()
				<-release
				conv := fmt.Sprintf("floor-%d", w)
				for i := 0; i < each; i++ {
					t0 := time.Now()
					if _, err := pool.Exec(ctx, `INSERT INTO loadgen_floor (conversation_id, data) VALUES ($1, $2)`, conv, []byte(`{"decision":"approve"}`)); err != nil {
						r.err = err
						return
					}
					r.samples = append(r.samples, time.Since(t0))
				}
			}()
		}
		close(release)
		var all []time.Duration
		var errs []error
		for w := 0; w < concurrency; w++ {
			r := <-results
			all = append(all, r.samples...)
			if r.err != nil {
				errs = append(errs, r.err)
			}
		}
		if len(errs) > 0 {
			return all, fmt.Errorf("floor insert: %w", errs[0])
		}
		return all, nil
	}
}

// PostgresFloor returns a Config.Floor that measures the floor of the resolve path on the
// server's own database while the load runs: workers goroutines each commit a bare single-row
// INSERT (one autocommit statement, the cheapest durable write) every pace, through a pool
// with pgxpool's defaults, the same as the server's store (max(4, CPUs) connections). The
// table is created for the run and dropped after it.
func PostgresFloor(databaseURL string, workers int, pace time.Duration) func(ctx context.Context) ([]time.Duration, error) {
	return func(ctx context.Context) (_ []time.Duration, err error) {
		// Setup and cleanup must outlive the run's context, which ends the measuring.
		setup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(setup, databaseURL)
		if err != nil {
			return nil, fmt.Errorf("open floor database: %w", err)
		}
		defer pool.Close()
		if _, err := pool.Exec(setup, strings.Replace(floorTable, "loadgen_floor", "loadgen_floor_paced", 1)); err != nil {
			return nil, fmt.Errorf("create floor table: %w", err)
		}
		defer func() {
			if _, derr := pool.Exec(setup, `DROP TABLE loadgen_floor_paced`); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop floor table: %w", derr))
			}
		}()
		results := make(chan []time.Duration, workers)
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			go func() {
				var samples []time.Duration
				defer func() { results <- samples }()
				tick := time.NewTicker(pace)
				defer tick.Stop()
				conv := fmt.Sprintf("floor-%d", w)
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					t0 := time.Now()
					_, err := pool.Exec(ctx, `INSERT INTO loadgen_floor_paced (conversation_id, data) VALUES ($1, $2)`, conv, []byte(`{"decision":"approve"}`))
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					samples = append(samples, time.Since(t0))
				}
			}()
		}
		var all []time.Duration
		for w := 0; w < workers; w++ {
			all = append(all, <-results...)
		}
		select {
		case e := <-errs:
			err = fmt.Errorf("floor insert: %w", e)
		default:
		}
		return all, err
	}
}
