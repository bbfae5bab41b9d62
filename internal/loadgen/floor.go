package loadgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

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
		if _, err := pool.Exec(setup, `CREATE TABLE loadgen_floor (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id text NOT NULL, data json)`); err != nil {
			return nil, fmt.Errorf("create floor table: %w", err)
		}
		defer func() {
			if _, derr := pool.Exec(setup, `DROP TABLE loadgen_floor`); derr != nil {
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
					_, err := pool.Exec(ctx, `INSERT INTO loadgen_floor (conversation_id, data) VALUES ($1, $2)`, conv, []byte(`{"decision":"approve"}`))
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
