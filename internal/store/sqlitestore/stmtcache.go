package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// maxCachedStatements bounds the statement cache. The texts are the store's own (a batch's
// multi-row INSERTs vary with their row counts); past the bound a statement simply runs
// uncached.
const maxCachedStatements = 256

// stmtCache holds statements prepared on the writer, which has one connection: without it,
// SQLite compiled every statement of every append again (sqlite3_prepare was the embedded
// store's largest CPU cost on the approve path, docs/benchmarks.md). Inside a transaction a
// cached statement is bound to it with Tx.StmtContext, which reuses the preparation made on that
// same connection. A statement first seen inside a transaction is prepared after it ends:
// preparing on the writer while a transaction holds its only connection would wait for it
// forever.
type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt // guarded by mu
}

// get returns the prepared statement of q; on a miss it prepares q at once when now (the caller
// holds no transaction), else returns nil.
func (c *stmtCache) get(ctx context.Context, w *sql.DB, q string, now bool) *sql.Stmt {
	c.mu.Lock()
	st := c.stmts[q]
	c.mu.Unlock()
	if st != nil || !now {
		return st
	}
	c.prepare(ctx, w, []string{q})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stmts[q]
}

// prepare adds the statements qs that are not cached yet, while there is room. A statement that
// does not prepare is left to run uncached (its error shows when it runs).
func (c *stmtCache) prepare(ctx context.Context, w *sql.DB, qs []string) {
	for _, q := range qs {
		c.mu.Lock()
		_, have := c.stmts[q]
		full := len(c.stmts) >= maxCachedStatements
		c.mu.Unlock()
		if have || full {
			continue
		}
		st, err := w.PrepareContext(context.WithoutCancel(ctx), q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if _, raced := c.stmts[q]; raced || len(c.stmts) >= maxCachedStatements {
			_ = st.Close() // another caller cached it first (or the cache filled)
		} else {
			if c.stmts == nil {
				c.stmts = map[string]*sql.Stmt{}
			}
			c.stmts[q] = st
		}
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.stmts {
		if err := st.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close statement: %w", err))
		}
		delete(c.stmts, q)
	}
	return errors.Join(errs...)
}

func (d *db) execStmt(ctx context.Context, st *sql.Stmt, args []any) (int64, error) {
	res, err := st.ExecContext(ctx, encodeArgs(args)...)
	if err != nil {
		return 0, mapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("rows affected: %w", err)
	}
	return n, nil
}
