// Package sqlitestore is the embedded store: one SQLite file, no server, no cgo
// (modernc.org/sqlite, a pure-Go translation of SQLite, so `go run ./cmd/web` works on a fresh
// machine and cross-compiles).
//
// It is for ONE process. Writes go through a single connection (appends serialize, and every
// write transaction takes the write lock at BEGIN), reads through a small pool of read-only
// connections that WAL lets run beside the writer. Several handles in one process on one file
// are safe (the tests open two); several processes are not supported — use PostgreSQL
// (package pgstore) for that.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
	"parley/migrations"
)

// schemaMigrations are the embedded store's migrations (migrations/sqlite), in version order;
// schemaVersion is the newest one's, what PRAGMA user_version says once they are applied.
var (
	schemaMigrations = mustLoad(migrations.SQLite)
	schemaVersion    = schemaMigrations[len(schemaMigrations)-1].Version
)

func mustLoad(d migrations.Dialect) []migrations.Migration {
	ms, err := migrations.Load(d)
	if err != nil {
		panic(err) // the embedded files are broken: package migrations' tests say how
	}
	return ms
}

// beforeUpgrade runs Go steps of a migration before its SQL (by version), in the migration's
// transaction.
var beforeUpgrade = map[int]func(ctx context.Context, tx *sql.Tx) error{
	20: chainUnkeyed,
}

// chainUnkeyed chains the audit records still unchained, in id order, after the chain's head,
// with the unkeyed hash they would have got from the next write before migration 020
// (store.AuditHash): from migration 020 on, no record can be updated.
func chainUnkeyed(ctx context.Context, tx *sql.Tx) error {
	var seq int64
	var head string
	err := tx.QueryRowContext(ctx, `SELECT chain_seq, hash FROM audit WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1`).Scan(&seq, &head)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read the audit chain's head: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, detail, at
		FROM audit WHERE chain_seq IS NULL ORDER BY id`)
	if err != nil {
		return fmt.Errorf("read unchained audit records: %w", err)
	}
	var todo []store.AuditRecord
	for rows.Next() {
		var r store.AuditRecord
		var detail string
		var at int64
		if err := rows.Scan(&r.ID, &r.ConversationID, &r.ToolCallID, &r.Tool, &r.ActorID, &r.Action, &r.Reason, &r.ArgsHash, &detail, &at); err != nil {
			_ = rows.Close()
			return fmt.Errorf("read unchained audit records: %w", err)
		}
		r.Detail, r.At = []byte(detail), time.UnixMicro(at).UTC()
		todo = append(todo, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read unchained audit records: %w", err)
	}
	for _, r := range todo {
		seq++
		r.Seq = seq
		h := store.AuditHash(head, r)
		if _, err := tx.ExecContext(ctx, `UPDATE audit SET chain_seq = ?, prev_hash = ?, hash = ? WHERE id = ?`, seq, head, h, r.ID); err != nil {
			return fmt.Errorf("chain audit record %d: %w", r.ID, err)
		}
		head = h
	}
	return nil
}

// legacyVersions maps the PRAGMA user_version of a file written before the stores shared one
// numbered line of migrations — when the embedded store kept a schema.sql and counted its own
// versions, 1 to 8 — to the migration whose schema that version is (the count's step k is the
// numbered file that holds it). Such a file is upgraded from there. The two counts cannot be
// confused: migrate commits a file only at the newest version, and the numbered line was at 17
// already when it replaced the old count.
var legacyVersions = map[int]int{1: 1, 2: 3, 3: 4, 4: 5, 5: 8, 6: 9, 7: 10, 8: 17}

// busyTimeout is how long a statement waits for another handle's write lock.
const busyTimeout = 10 * time.Second

// readers is the size of the read-only pool.
const readers = 4

// Store is the embedded store.Store.
type Store struct {
	sqlcore.Core
	d         *db
	ix        *indexer
	log       *slog.Logger
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock that stamps rows and decides session expiry (default: the wall clock).
func WithClock(c clock.Clock) Option { return func(s *Store) { s.Clock = c } }

// WithSearchTimeout bounds each search (default store.SearchTimeout): tests make it short.
func WithSearchTimeout(d time.Duration) Option { return func(s *Store) { s.SearchTimeout = d } }

// WithAuditKey sets the key the audit chain is linked with (store/auditkey.go). Without it the
// store links with a random key of its own: its records cannot be verified once it is closed.
func WithAuditKey(k *store.AuditKey) Option { return func(s *Store) { s.ChainKey = k } }

// WithAuditAnchor sets where the audit chain's head goes after each commit that moves it.
func WithAuditAnchor(a store.AuditAnchor) Option { return func(s *Store) { s.Anchor = a } }

// WithLogger sets where the background search indexer reports a failed round (default:
// nowhere; the entries stay pending and the next search indexes them or reports the error).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// Open opens or creates the database file at path (creating its directory), applies the schema
// and returns the store. Only one process may use the file at a time.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open embedded store: %q is not a usable file name (empty, or contains ? or #)", path)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open embedded store: %w", err)
		}
	}
	common := "_pragma=busy_timeout(" + fmt.Sprint(busyTimeout.Milliseconds()) + ")&_pragma=foreign_keys(1)"
	// synchronous(FULL): a commit is on disk before Append returns — the log is the truth.
	w, err := sql.Open("sqlite", path+"?"+common+"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open embedded store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open embedded store %s: %w", path, err)
	}
	wr, err := newWriter(ctx, w)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open embedded store %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		_ = wr.close()
		_ = w.Close()
		return nil, fmt.Errorf("open embedded store %s: %w", path, err)
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	d := &db{pool: w, w: wr, r: r}
	s := &Store{Core: sqlcore.Core{DB: d, Clock: clock.Real{}, Dialect: sqlcore.Dialect{FindSQL: findSQL, Match: ftsMatch, Excerpt: excerpt}}, d: d,
		log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(s)
	}
	if err := s.InitAudit(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("open embedded store %s: %w", path, err)
	}
	s.ix = newIndexer(d, s.Clock, s.log)
	s.ix.start()
	return s, nil
}

// Close stops the background indexer and closes the file. Closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.ix.close()
		s.closeErr = s.DB.Close()
	})
	return s.closeErr
}

// Append implements store.Store (sqlcore.Core.Append) and leaves the messages it logged to
// the search indexer (index.go).
func (s *Store) Append(ctx context.Context, conversationID string, afterSeq int64, b store.Batch) (int64, error) {
	// An entry's data is JSON, as PostgreSQL's json column insists; SQLite stores any bytes, and
	// the search indexer reads messages' data as JSON later, outside this append (index.go).
	for i, e := range b.Entries {
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return 0, fmt.Errorf("append to conversation %q: entry %d (%s): data is not valid JSON", conversationID, i, e.Type)
		}
	}
	seq, err := s.Core.Append(ctx, conversationID, afterSeq, b)
	if err == nil && len(b.Entries) > 0 {
		s.ix.appended(conversationID)
	}
	return seq, err
}

// FindConversations implements store.Store: it first indexes the owner's messages appended
// since they were last indexed (index.go), so that it finds every message appended before it
// was called, then searches.
func (s *Store) FindConversations(ctx context.Context, ownerID, query string, limit int) ([]store.SearchHit, error) {
	if err := s.d.indexOwner(ctx, ownerID); err != nil {
		return nil, fmt.Errorf("find conversations: %w", err)
	}
	return s.Core.FindConversations(ctx, ownerID, query, limit)
}

// SchemaVersion implements store.Store: have is the file's PRAGMA user_version, want the
// newest embedded migration's version.
func (s *Store) SchemaVersion(ctx context.Context) (have, want int, err error) {
	rows, err := s.DB.Query(ctx, `PRAGMA user_version`)
	if err != nil {
		return 0, schemaVersion, fmt.Errorf("read schema version: %w", err)
	}
	defer rows.Close()
	var v int64
	if rows.Next() {
		if err := rows.Scan(&v); err != nil {
			return 0, schemaVersion, fmt.Errorf("read schema version: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, schemaVersion, fmt.Errorf("read schema version: %w", err)
	}
	return int(v), schemaVersion, nil
}

// migrate applies the migrations the file lacks, all in one transaction (a file is never left
// between two versions), and refuses a file written by a newer binary.
func migrate(ctx context.Context, w *sql.DB) (err error) {
	tx, err := w.BeginTx(ctx, nil) // IMMEDIATE: two handles opening a new file do not both create it
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the migration error is the one to report
		}
	}()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	current := v
	if legacy, ok := legacyVersions[v]; ok {
		current = legacy
	}
	switch {
	case current > schemaVersion:
		return fmt.Errorf("file is at schema version %d, this binary knows up to %d: %w", v, schemaVersion, store.ErrSchemaTooNew)
	case v == schemaVersion:
		return tx.Commit()
	}
	for _, m := range schemaMigrations {
		if m.Version <= current {
			continue
		}
		if before := beforeUpgrade[m.Version]; before != nil {
			if err := before(ctx, tx); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	return tx.Commit()
}

// db adapts database/sql + modernc to sqlcore.DB.
type db struct {
	pool *sql.DB  // the writer's pool: one connection, which w holds
	w    *writer  // every write
	r    *sql.DB  // the read-only pool
	qs   sync.Map // PostgreSQL-style query → SQLite-style query
}

// rewrite turns $1 placeholders into ?1 (SQLite's numbered parameters).
func (d *db) rewrite(q string) string {
	if v, ok := d.qs.Load(q); ok {
		return v.(string)
	}
	b := []byte(q)
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '$' && b[i+1] >= '0' && b[i+1] <= '9' {
			b[i] = '?'
		}
	}
	out := string(b)
	d.qs.Store(q, out)
	return out
}

// args encodes times as microseconds since the epoch.
func encodeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if t, ok := a.(time.Time); ok {
			out[i] = t.UnixMicro()
			continue
		}
		out[i] = a
	}
	return out
}

// mapErr turns constraint failures into the store's sentinels.
func mapErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%w: %w", store.ErrNotFound, err)
		}
	}
	return err
}

// querier is a pool (the readers) or the writer's connection.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// result is what a write reports: the rows it changed, its error mapped.
func result(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, mapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("rows affected: %w", err)
	}
	return n, nil
}

func (d *db) query(ctx context.Context, on querier, q string, args []any) (sqlcore.Rows, error) {
	rows, err := on.QueryContext(ctx, d.rewrite(q), encodeArgs(args)...)
	if err != nil {
		return nil, mapErr(err)
	}
	return &sqlRows{rows: rows}, nil
}

// Exec runs a single write statement on the writer, as a transaction of its own.
func (d *db) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	if err := d.w.acquire(ctx); err != nil {
		return 0, err
	}
	defer d.w.release()
	return result(d.w.exec(ctx, d.rewrite(q), encodeArgs(args)))
}

// Query reads through the read-only pool.
func (d *db) Query(ctx context.Context, q string, args ...any) (sqlcore.Rows, error) {
	return d.query(ctx, d.r, q, args)
}

// Begin waits for the writer and opens a write transaction on it, which holds the writer until
// Commit or Rollback.
func (d *db) Begin(ctx context.Context) (sqlcore.Tx, error) {
	if err := d.w.acquire(ctx); err != nil {
		return nil, err
	}
	if _, err := d.w.exec(ctx, beginSQL, nil); err != nil {
		d.w.release()
		return nil, mapErr(err)
	}
	return &sqlTx{d: d}, nil
}

func (d *db) Ping(ctx context.Context) error {
	if err := d.w.acquire(ctx); err != nil {
		return err
	}
	err := d.w.conn.PingContext(ctx)
	d.w.release()
	if err != nil {
		return err
	}
	return d.r.PingContext(ctx)
}

func (d *db) Close() error {
	return errors.Join(d.w.close(), d.r.Close(), d.pool.Close())
}

// sqlTx is a write transaction on the writer, whose turn it holds until it ends.
type sqlTx struct {
	d    *db
	done bool
}

func (t *sqlTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	if t.done {
		return 0, sql.ErrTxDone
	}
	return result(t.d.w.exec(ctx, t.d.rewrite(q), encodeArgs(args)))
}

// Query reads inside the transaction, unprepared: a cached statement run again while an earlier
// result set of it is still open would reset that result set.
func (t *sqlTx) Query(ctx context.Context, q string, args ...any) (sqlcore.Rows, error) {
	if t.done {
		return nil, sql.ErrTxDone
	}
	return t.d.query(ctx, t.d.w.conn, q, args)
}

// Commit commits and gives the writer back. A COMMIT that fails (its context ended while it
// waited for a lock, say) can leave the transaction open on the connection: it is rolled back,
// so the next transaction starts clean.
func (t *sqlTx) Commit(ctx context.Context) error {
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	defer t.d.w.release()
	if _, err := t.d.w.exec(ctx, commitSQL, nil); err != nil {
		_, _ = t.d.w.exec(context.WithoutCancel(ctx), rollbackSQL, nil) // "no transaction is active" when the COMMIT ended it
		return mapErr(err)
	}
	return nil
}

// Rollback rolls back and gives the writer back; it runs even when ctx has ended.
func (t *sqlTx) Rollback(ctx context.Context) error {
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	defer t.d.w.release()
	_, err := t.d.w.exec(context.WithoutCancel(ctx), rollbackSQL, nil)
	return err
}

// sqlRows decodes the stored forms: microsecond integers into times, NULL blobs into nil JSON.
type sqlRows struct {
	rows *sql.Rows
}

func (r *sqlRows) Next() bool { return r.rows.Next() }
func (r *sqlRows) Err() error { return mapErr(r.rows.Err()) }
func (r *sqlRows) Close()     { _ = r.rows.Close() } // Err reports what matters

func (r *sqlRows) Scan(dest ...any) error {
	scan := make([]any, len(dest))
	var after []func()
	for i, d := range dest {
		switch p := d.(type) {
		case *time.Time:
			var v int64
			scan[i] = &v
			after = append(after, func() { *p = time.UnixMicro(v).UTC() })
		case **time.Time:
			var v sql.NullInt64
			scan[i] = &v
			after = append(after, func() {
				*p = nil
				if v.Valid {
					t := time.UnixMicro(v.Int64).UTC()
					*p = &t
				}
			})
		case *json.RawMessage:
			var v []byte
			scan[i] = &v
			after = append(after, func() { *p = v })
		default:
			scan[i] = d
		}
	}
	if err := r.rows.Scan(scan...); err != nil {
		return err
	}
	for _, f := range after {
		f()
	}
	return nil
}
