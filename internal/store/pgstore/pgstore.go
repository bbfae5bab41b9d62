// Package pgstore is the PostgreSQL store.Store, through pgx/v5's pgxpool. It is the store that
// several Parley processes share: appends are checked against the expected sequence inside a
// transaction (the row lock on the conversation serializes racing writers, and the loser sees
// the new sequence and gets store.ErrConflict), and due expiries are claimed with
// FOR UPDATE SKIP LOCKED so each one goes to one process per lease.
//
// Open applies the embedded migrations (package migrations) under an advisory lock before
// returning; Migrate does only that, for `web migrate`. The pool takes pgx's defaults
// (max(4, CPUs) connections); the URL's pool_max_conns and other pgxpool parameters override them.
// Half of those connections commit appends in groups (group.go), the rest serve everything else.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
)

// ConnectTimeout bounds how long Open and Migrate wait for an unreachable server.
const ConnectTimeout = 5 * time.Second

// Store is the PostgreSQL store.Store.
type Store struct {
	sqlcore.Core
	pool      *pgxpool.Pool
	want      int // the newest embedded migration
	closeOnce sync.Once

	committers     int           // group-commit slots (write-pool connections); 0 appends without grouping
	writePool      *pgxpool.Pool // the groups' connections; nil without grouping
	group          *grouper      // nil without grouping
	groupFallbacks atomic.Int64  // groups rerun one append at a time
	groupedAppends atomic.Int64  // appends committed in a group of more than one

	// writer is the cluster node whose appends these are (SetWriter): parley_append refuses one
	// for a conversation another process claimed since. Empty: not checked.
	writer atomic.Pointer[string]
}

// SetWriter names the cluster node this store appends for: from then on an append to a
// conversation that another process has claimed since this one did is refused with
// store.ErrNotOwner and writes nothing (migration 016). Call it before the agent starts.
func (s *Store) SetWriter(node string) { s.writer.Store(&node) }

func (s *Store) writerID() string {
	if w := s.writer.Load(); w != nil {
		return *w
	}
	return ""
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithCommitters sets how many groups of appends may commit at once (see group.go), each on a
// connection of its own taken from the configured pool size; 0 turns grouping off, so each
// append is its own transaction on the shared pool. The default is half the pool's connections
// (pgx's default size is max(4, CPUs), so 2 of 4), leaving the rest to reads and other writes;
// a pool of one connection does not group.
func WithCommitters(n int) Option { return func(s *Store) { s.committers = max(n, 0) } }

// WithSearchTimeout bounds each search (default store.SearchTimeout): tests make it short.
func WithSearchTimeout(d time.Duration) Option { return func(s *Store) { s.SearchTimeout = d } }

// WithClock sets the clock that stamps rows and decides session expiry (default: the wall clock).
func WithClock(c clock.Clock) Option { return func(s *Store) { s.Clock = c } }

// WithAuditKey sets the key the audit chain is linked with (store/auditkey.go). Every process on
// one database must have the same key. Without it the store links with a random key of its own:
// its records cannot be verified once it is closed.
func WithAuditKey(k *store.AuditKey) Option { return func(s *Store) { s.ChainKey = k } }

// WithAuditAnchor sets where the audit chain's head goes after each commit that moves it.
func WithAuditAnchor(a store.AuditAnchor) Option { return func(s *Store) { s.Anchor = a } }

// Open connects to databaseURL (failing within ConnectTimeout when the server does not answer,
// with an error naming host and database but never the password), applies pending migrations
// and returns the store. A database migrated by a newer binary is refused with
// store.ErrSchemaTooNew. A nil logger logs nothing.
func Open(ctx context.Context, databaseURL string, logger *slog.Logger, opts ...Option) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		Core:       sqlcore.Core{Dialect: sqlcore.Dialect{SkipLocked: "FOR UPDATE SKIP LOCKED", KeyShare: "FOR KEY SHARE", ForUpdate: "FOR UPDATE", ChainLock: sqlcore.ChainLockPG, FindSQL: findSQL, SearchTimeoutSQL: searchTimeoutSQL, Match: tsMatch}, Clock: clock.Real{}},
		committers: -1, // half the pool, decided once its size is known
	}
	for _, o := range opts {
		o(s)
	}
	cfg, err := parseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	if s.committers < 0 {
		s.committers = int(cfg.MaxConns) / 2
	}
	if s.committers > 0 && cfg.MaxConns > 1 {
		// The committers' connections come out of the configured size, not on top of it.
		s.committers = min(s.committers, int(cfg.MaxConns)-1)
		cfg.MaxConns -= int32(s.committers)
	} else {
		s.committers = 0
	}
	pool, err := openPool(ctx, cfg, databaseURL)
	if err != nil {
		return nil, err
	}
	want, err := migrate(ctx, pool, logger)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate %s: %w", Redact(databaseURL), err)
	}
	s.DB, s.pool, s.want = &db{pool: pool}, pool, want
	if err := s.InitAudit(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if s.committers > 0 {
		wcfg := cfg.Copy()
		wcfg.MaxConns, wcfg.MinConns = int32(s.committers), 0
		s.writePool, err = openPool(ctx, wcfg, databaseURL)
		if err != nil {
			pool.Close()
			return nil, err
		}
		s.group = newGrouper(s.committers)
	}
	return s, nil
}

// Append implements store.Store with the rules of sqlcore.Core.Append, in one round trip: the
// sequence check (parley_append, which raises on a conflict) and every write are sent as one
// pipelined batch, which PostgreSQL runs as a single implicit transaction — an error anywhere
// rolls back all of it. Appends that arrive together share that transaction (group.go). A
// caller's context ending while its append waits for a connection returns ctx.Err() with nothing
// written; once the append is being committed — or the caller is committing a group, its own
// append with others' — Append returns only with the outcome (a group is bounded by 30 s).
func (s *Store) Append(ctx context.Context, conversationID string, afterSeq int64, b store.Batch) (int64, error) {
	r := &appendReq{ctx: ctx, conv: conversationID, afterSeq: afterSeq, batch: b, now: s.Stamp(), done: make(chan error, 1)}
	var err error
	if s.group != nil {
		err = s.appendGrouped(ctx, r)
	} else {
		err = s.sendAppend(ctx, []*appendReq{r})
	}
	if err != nil {
		return 0, err
	}
	return afterSeq + int64(len(b.Entries)), nil
}

// Migrate applies pending migrations to databaseURL and returns; it is `web migrate`.
func Migrate(ctx context.Context, databaseURL string) error {
	pool, err := connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate(ctx, pool, slog.Default()); err != nil {
		return fmt.Errorf("migrate %s: %w", Redact(databaseURL), err)
	}
	return nil
}

// findSQL finds an owner's conversations by title (LIKE, as SearchConversations) or by message
// (the entries' tsvector, migration 009), naming each conversation's most recent matching message
// with an excerpt. It walks the owner's own conversations, newest message first (the entries'
// primary key), never an index over every owner's messages: its cost is bounded by the
// searcher's data, not by everyone's (migration 012). The excerpt is ts_headline over a window
// of the message as written (markers removed, so the only markers are ts_headline's), made for
// the page of hits returned alone: store.SnippetWindow characters from store.SnippetLead before
// the first place $5 (the longest search word) appears, else from the start. ts_headline parses
// all the text it is given, ~12 ms per 100 kB message: over the whole message, one search of
// 200 such hits cost 0.63–2.7 s of the database's CPU. It marks the words its own parser sees; a
// match inside what that parser reads as one token (a tag, an address, a path) is shown
// unmarked.
var findSQL = `WITH q AS (SELECT to_tsquery('simple', $2) AS q),
hits AS (
	SELECT c.id AS conversation_id, h.seq
	FROM conversations c, q, LATERAL (
		SELECT e.seq FROM entries e WHERE e.conversation_id = c.id AND e.search @@ q.q
		ORDER BY e.seq DESC LIMIT 1) h
	WHERE c.owner_id = $1
),
found AS (
	SELECT c.id, c.owner_id, c.title, c.status, c.last_seq, c.created_at, c.updated_at, h.seq
	FROM conversations c LEFT JOIN hits h ON h.conversation_id = c.id
	WHERE c.owner_id = $1 AND (h.seq IS NOT NULL OR lower(c.title) LIKE lower($3) ESCAPE '\')
	ORDER BY c.updated_at DESC, c.created_at DESC, c.id LIMIT $4
)
SELECT f.id, f.owner_id, f.title, f.status, f.last_seq, f.created_at, f.updated_at, coalesce(f.seq, 0),
	coalesce((SELECT ts_headline('simple', substr(m.t, greatest(1, strpos(lower(m.t), $5) - ` + snippetLead + `), ` + snippetWindow + `), q.q,
			'StartSel=' || chr(2) || ', StopSel=' || chr(3) || ', MaxWords=24, MinWords=8')
		FROM entries e, q, LATERAL (SELECT left(translate(parley_message_text(e.data), E'\x02\x03', ''), 100000) AS t) m
		WHERE e.conversation_id = f.id AND e.seq = f.seq), '')
FROM found f
ORDER BY f.updated_at DESC, f.created_at DESC, f.id`

var (
	snippetLead   = strconv.Itoa(store.SnippetLead)
	snippetWindow = strconv.Itoa(store.SnippetWindow)
)

// searchTimeoutSQL bounds a search in the server (sqlcore.Dialect.SearchTimeoutSQL): it holds
// even when the client that asked is gone.
const searchTimeoutSQL = `SELECT set_config('statement_timeout', $1::text, true)`

// tsMatch is the tsquery of FindSQL: every word, each also as a prefix when it has at least
// sqlcore.MinPrefix characters ("budg:* & q3"): a one-letter prefix matches nearly every
// message in the index, every owner's, before the owner's are kept.
func tsMatch(_ string, words []string) string {
	return sqlcore.MatchTerms(words, func(w string) string { return w }, ":*", " & ")
}

// SchemaVersion implements store.Store: have is the newest version in schema_migrations (0 when
// the table is missing), want the newest migration embedded in this binary.
func (s *Store) SchemaVersion(ctx context.Context) (have, want int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM schema_migrations`).Scan(&have)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: never migrated
		return 0, s.want, nil
	}
	if err != nil {
		return 0, s.want, fmt.Errorf("read schema version: %w", err)
	}
	return have, s.want, nil
}

// Close waits for the groups committing (appends still queued fail) and closes the pools.
// Closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.group != nil {
			s.group.stop()
		}
		if s.writePool != nil {
			s.writePool.Close()
		}
		s.pool.Close()
	})
	return nil
}

// Pool is the connection pool, for what coordinates several processes through the same
// database (package cluster), benchmarks and tools that need raw SQL.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func connect(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	return openPool(ctx, cfg, databaseURL)
}

// parseConfig reads databaseURL into a pool configuration, with ConnectTimeout as the longest
// connect timeout.
func parseConfig(databaseURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's parse errors can quote the URL; say only what is safe.
		return nil, fmt.Errorf("database URL %s is not valid: %s", Redact(databaseURL), redactErr(err, databaseURL))
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > ConnectTimeout {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	new(connHealth).install(cfg) // shared by the copies of cfg: the write pool, the cluster's
	return cfg, nil
}

// openPool connects a pool with cfg and checks the server answers within ConnectTimeout.
func openPool(ctx context.Context, cfg *pgxpool.Config, databaseURL string) (*pgxpool.Pool, error) {
	where := Redact(databaseURL)
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %s", where, redactErr(err, databaseURL))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %s", where, redactErr(err, databaseURL))
	}
	return pool, nil
}

// redactErr is err's message with the URL's password removed, in case a driver quoted it.
func redactErr(err error, databaseURL string) string {
	msg := err.Error()
	if cfg, perr := pgconn.ParseConfig(databaseURL); perr == nil && cfg.Password != "" {
		msg = strings.ReplaceAll(msg, cfg.Password, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(cfg.Password), "xxxxx")
	}
	return msg
}

// Redact describes a database URL (or key=value connection string) for messages: user, host,
// port and database, never the password.
func Redact(databaseURL string) string {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		if u, uerr := url.Parse(databaseURL); uerr == nil && u.Host != "" {
			return fmt.Sprintf("host %s database %q", u.Host, strings.TrimPrefix(u.Path, "/"))
		}
		return "(unparseable database URL)"
	}
	user := ""
	if cfg.User != "" {
		user = " as " + cfg.User
	}
	return fmt.Sprintf("host %s:%d database %q%s", cfg.Host, cfg.Port, cfg.Database, user)
}

// db adapts pgxpool to sqlcore.DB.
type db struct {
	pool *pgxpool.Pool
}

type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func exec(ctx context.Context, on pgQuerier, q string, args []any) (int64, error) {
	tag, err := on.Exec(ctx, q, args...)
	if err != nil {
		return 0, mapErr(err)
	}
	return tag.RowsAffected(), nil
}

func query(ctx context.Context, on pgQuerier, q string, args []any) (sqlcore.Rows, error) {
	rows, err := on.Query(ctx, q, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return &pgRows{rows: rows}, nil
}

func (d *db) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return exec(ctx, d.pool, q, args)
}

func (d *db) Query(ctx context.Context, q string, args ...any) (sqlcore.Rows, error) {
	return query(ctx, d.pool, q, args)
}

func (d *db) Begin(ctx context.Context) (sqlcore.Tx, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	return &pgTx{tx: tx}, nil
}

func (d *db) Ping(ctx context.Context) error { return d.pool.Ping(ctx) }

func (d *db) Close() error {
	d.pool.Close()
	return nil
}

type pgTx struct{ tx pgx.Tx }

func (t *pgTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return exec(ctx, t.tx, q, args)
}

func (t *pgTx) Query(ctx context.Context, q string, args ...any) (sqlcore.Rows, error) {
	return query(ctx, t.tx, q, args)
}

func (t *pgTx) Commit(ctx context.Context) error   { return mapErr(t.tx.Commit(ctx)) }
func (t *pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// pgRows hands times back in UTC and JSON as the stored bytes.
type pgRows struct{ rows pgx.Rows }

func (r *pgRows) Next() bool { return r.rows.Next() }
func (r *pgRows) Err() error { return mapErr(r.rows.Err()) }
func (r *pgRows) Close()     { r.rows.Close() }

func (r *pgRows) Scan(dest ...any) error {
	scan := append([]any(nil), dest...)
	var after []func()
	for i, d := range dest {
		switch p := d.(type) {
		case *time.Time:
			after = append(after, func() { *p = p.UTC() })
		case **time.Time:
			after = append(after, func() {
				if *p != nil {
					t := (*p).UTC()
					*p = &t
				}
			})
		case *json.RawMessage:
			var v []byte
			scan[i] = &v
			after = append(after, func() { *p = v })
		}
	}
	if err := r.rows.Scan(scan...); err != nil {
		return mapErr(err)
	}
	for _, f := range after {
		f()
	}
	return nil
}

// mapErr turns PostgreSQL's constraint errors into the store's sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		case "23503", // foreign_key_violation
			"P0002": // no_data_found, raised by parley_append for a missing conversation
			return fmt.Errorf("%w: %w", store.ErrNotFound, err)
		case "PY409": // parley_append: another writer moved the log first
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		case "PY410": // parley_append: another process claimed the conversation (migration 016)
			return fmt.Errorf("%w: %w", store.ErrNotOwner, err)
		}
	}
	return err
}
