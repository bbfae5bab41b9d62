package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// maxCachedStatements bounds the writer's prepared statements. The texts are the store's own (a
// batch's multi-row INSERTs vary with their row counts); past the bound a statement simply runs
// unprepared.
const maxCachedStatements = 256

// errClosed answers a write made after Close.
var errClosed = errors.New("embedded store closed")

// The statements that open and end a write transaction, prepared once like the rest:
// database/sql's transactions prepared BEGIN and COMMIT anew for every transaction.
const (
	beginSQL    = `BEGIN IMMEDIATE` // the write lock at once: no upgrade from a read lock can fail later
	commitSQL   = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// writer is the store's one write connection, held for the store's life: every write runs on it
// while holding its turn — a transaction from BEGIN IMMEDIATE to COMMIT or ROLLBACK, or one
// statement — so its statements are prepared once, on that connection, and kept. Without them
// SQLite compiled every statement of every append again (sqlite3_prepare was the embedded
// store's largest CPU cost on the approve path, docs/benchmarks.md). A statement prepared on the
// connection runs inside the transaction open on it as is: no per-transaction wrapper, and no
// waiting for the pool's one connection, which the writer holds.
type writer struct {
	conn   *sql.Conn
	turn   chan struct{}        // capacity 1: holding it is the right to use conn
	stmts  map[string]*sql.Stmt // only with the turn
	closed bool                 // only with the turn
}

func newWriter(ctx context.Context, w *sql.DB) (*writer, error) {
	conn, err := w.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("hold the write connection: %w", err)
	}
	return &writer{conn: conn, turn: make(chan struct{}, 1), stmts: map[string]*sql.Stmt{}}, nil
}

// acquire waits for the writer's turn, or for ctx to end.
func (w *writer) acquire(ctx context.Context) error {
	select {
	case w.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if w.closed {
		w.release()
		return errClosed
	}
	return nil
}

func (w *writer) release() { <-w.turn }

// stmt returns q prepared on the connection, preparing it on first use; nil past the bound or
// when q does not prepare (it then runs unprepared and reports its own error). With the turn.
func (w *writer) stmt(ctx context.Context, q string) *sql.Stmt {
	if st, ok := w.stmts[q]; ok {
		return st
	}
	if len(w.stmts) >= maxCachedStatements {
		return nil
	}
	st, err := w.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	w.stmts[q] = st
	return st
}

// exec runs q on the connection, prepared when it can be. With the turn.
func (w *writer) exec(ctx context.Context, q string, args []any) (sql.Result, error) {
	if st := w.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return w.conn.ExecContext(ctx, q, args...)
}

// queryRow reads one row on the connection, prepared when it can be: Scan closes the row's
// result set before the statement can run again. With the turn.
func (w *writer) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	if st := w.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...).Scan(dest...)
	}
	return w.conn.QueryRowContext(ctx, q, args...).Scan(dest...)
}

// close waits for the write in progress, then closes the statements and gives the connection
// back to its pool; later writes get errClosed.
func (w *writer) close() error {
	w.turn <- struct{}{}
	defer w.release()
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	for q, st := range w.stmts {
		if err := st.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close statement: %w", err))
		}
		delete(w.stmts, q)
	}
	if err := w.conn.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close the write connection: %w", err))
	}
	return errors.Join(errs...)
}
