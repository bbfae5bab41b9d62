package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/store"
	"parley/migrations"
)

// migrationLock is the pg_advisory_lock key that serializes migrations across processes
// ("parley" in ASCII).
const migrationLock int64 = 0x7061726c6579

// loadMigrations returns PostgreSQL's migrations (migrations/postgres), in version order.
func loadMigrations() ([]migrations.Migration, error) { return migrations.Load(migrations.Postgres) }

// migrate applies the embedded migrations and returns the newest one's version.
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (int, error) {
	ms, err := loadMigrations()
	if err != nil {
		return 0, err
	}
	return ms[len(ms)-1].Version, applyMigrations(ctx, pool, ms, logger)
}

// applyMigrations applies every migration newer than the database's version, each in its own
// transaction with its schema_migrations row, holding an advisory lock so that two processes
// starting together apply each migration once. A database at a version above the newest of ms
// is refused with store.ErrSchemaTooNew.
func applyMigrations(ctx context.Context, pool *pgxpool.Pool, ms []migrations.Migration, logger *slog.Logger) (err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A failed unlock (the connection broke) is released by the server with the session.
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock); uerr != nil && err == nil {
			err = fmt.Errorf("release migration lock: %w", uerr)
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	if current > latest {
		return fmt.Errorf("the database is at schema version %d but this binary knows up to %d; run a newer Parley: %w",
			current, latest, store.ErrSchemaTooNew)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		for attempt := 1; ; attempt++ {
			err := applyOne(ctx, conn.Conn(), m)
			if err == nil {
				break
			}
			if !lockContention(err) || attempt == migrationAttempts {
				return err
			}
			// The running processes' writes held a table the migration locks: it waited its
			// lock_timeout and gave way (or was picked to end a deadlock). Try again shortly.
			logger.Warn("migration waited for locks; trying again", "name", m.Name, "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("migration %s: %w", m.Name, ctx.Err())
			case <-time.After(time.Duration(attempt) * migrationRetryWait):
			}
		}
		logger.Info("applied migration", "version", m.Version, "name", m.Name)
	}
	return nil
}

// migrationAttempts bounds how often a migration that lost a lock wait is tried; migrationRetryWait
// is the pause after the first failure, growing by as much after each.
const (
	migrationAttempts  = 5
	migrationRetryWait = time.Second
)

// applyOne runs one migration and records its version in a transaction of its own.
func applyOne(ctx context.Context, conn *pgx.Conn, m migrations.Migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		_ = tx.Rollback(ctx) // the migration's error is the one to report
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
		_ = tx.Rollback(ctx) // as above
		return fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}

// lockContention reports whether err is a lock wait the migration gave up (lock_not_available,
// raised by its lock_timeout) or a deadlock PostgreSQL broke by aborting it: nothing of it was
// written, and it may succeed once the running writes have moved on.
func lockContention(err error) bool {
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pe.Code == "55P03" || pe.Code == "40P01")
}
