// Package sqlcore is the SQL that both stores share. pgstore and sqlitestore each adapt their
// driver to DB and Tx (placeholders, time encoding, error mapping) and embed Core, which
// implements every store.Store method on top.
package sqlcore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// Querier runs statements. Queries are written with PostgreSQL placeholders ($1, $2 …); an
// adapter rewrites them for its driver. Arguments are strings, integers, []byte, time.Time (UTC,
// microseconds) or nil; Scan destinations are *string, *int64, *int, *[]byte, *json.RawMessage,
// *time.Time and **time.Time (NULL → nil). Errors are mapped: a missing row is not reported here
// (see QueryRow), a unique violation wraps store.ErrConflict and a foreign-key violation wraps
// store.ErrNotFound.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Rows is a result set.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Tx is a write transaction.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB is an adapted driver: reads go through Querier, writes through Begin.
type DB interface {
	Querier
	// Begin starts a write transaction. For SQLite it takes the write lock at once (IMMEDIATE).
	Begin(ctx context.Context) (Tx, error)
	Ping(ctx context.Context) error
	Close() error
}

// ChainLockPG is PostgreSQL's Dialect.ChainLock: the advisory lock every writer of the audit
// chain has taken since migration 008, held to the end of the transaction. The holder links its
// records in Go between two round trips, so a client that stalls there (a frozen process, a
// partitioned network) would hold up every writer of every process: the server ends a
// transaction left idle that long (SET LOCAL idle_in_transaction_session_timeout), which
// releases the lock.
const ChainLockPG = `SELECT set_config('idle_in_transaction_session_timeout', '10s', true), pg_advisory_xact_lock(7283650918263001)`

// MinPrefix is the shortest search word also matched as a prefix (Dialect.Match): shorter words
// match whole words only, so a one-letter query does not read every owner's index entries.
const MinPrefix = 3

// MatchTerms joins search words into a full-text query: each word as quote writes it, followed
// by prefix when it has at least MinPrefix characters, separated by sep (Dialect.Match).
func MatchTerms(words []string, quote func(string) string, prefix, sep string) string {
	parts := make([]string, len(words))
	for i, w := range words {
		parts[i] = quote(w)
		if utf8.RuneCountInString(w) >= MinPrefix {
			parts[i] += prefix
		}
	}
	return strings.Join(parts, sep)
}

// Dialect is what differs in the shared SQL.
type Dialect struct {
	// SkipLocked is appended to the SELECT that picks due expiries: "FOR UPDATE SKIP LOCKED" on
	// PostgreSQL, empty on SQLite where the single writer already serializes claims.
	SkipLocked string
	// KeyShare locks the conversation row that ScheduleExpiry reads before inserting beside it:
	// "FOR KEY SHARE" on PostgreSQL, whose log tables have no foreign key (migration 014), so
	// that a deletion of the conversation waits for the insert and then deletes its row; empty on
	// SQLite, whose single writer serializes the two and whose key refuses the row anyway.
	KeyShare string
	// ForUpdate locks the sign-in attempts' rows a transaction reads before it writes them:
	// "FOR UPDATE" on PostgreSQL; empty on SQLite, whose write transaction holds the only write
	// lock from its start.
	ForUpdate string
	// ChainLock serializes the audit chain's writers before one reads its head (governance.go):
	// a transaction-level advisory lock on PostgreSQL (ChainLockPG); empty on SQLite, whose
	// write transaction holds the only write lock from its start.
	ChainLock string
	// FindSQL finds an owner's conversations by title or message text (conversations.go,
	// FindConversations): $1 the owner, $2 the full-text query (Match), $3 the title's LIKE
	// pattern, $4 the limit, $5 the word an excerpt's window is placed around (lowercase); it
	// selects convCols, the matched message's seq (0 when none) and its excerpt ('' when none).
	FindSQL string
	// SearchTimeoutSQL, when set, runs before FindSQL in the same transaction with $1 the
	// timeout in milliseconds (a string): the database's own bound on the search (PostgreSQL's SET LOCAL
	// statement_timeout). Empty: the context's deadline alone bounds it.
	SearchTimeoutSQL string
	// Match makes the full-text query of FindSQL for ownerID's search from SearchWords (never
	// empty): every word, each also as a prefix. The words are letters and digits only, so
	// nothing in them is syntax. The owner is for an index whose terms are the owner's own
	// (SQLite's, migrations/sqlite/022).
	Match func(ownerID string, words []string) string
	// Excerpt, when set, makes a message hit's excerpt in Go from what FindSQL selected in its
	// place (a window of the message, in the dialect's own form) and the search words; unset,
	// FindSQL selects the excerpt itself.
	Excerpt func(selected string, words []string) string
}

// NewID returns 16 random bytes, hex-encoded: the id of a row whose caller gave none.
func NewID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

// ts normalizes a time for storage: UTC, microsecond precision, so both stores round-trip alike.
func ts(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// tsPtr is ts for an optional time; nil stays NULL.
func tsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ts(*t)
}

// jsonArg stores an empty payload as NULL.
func jsonArg(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}
