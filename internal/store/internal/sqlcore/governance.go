package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"parley/internal/store"
)

// ---- the audit trail's hash chain and grants ----

const (
	auditCols    = `id, conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, detail, at, COALESCE(chain_seq, 0), prev_hash, hash, key_id`
	grantCols    = `id, user_id, tool, scope, conversation_id, tool_call_id, created_by, created_at, expires_at, revoked_at, args_scope, args_hash`
	grantsInsert = `INSERT INTO grants (` + grantCols + `)`
)

var grantTypes = []string{"text", "text", "text", "text", "text", "text", "text", "timestamptz", "timestamptz", "timestamptz", "text", "text"}

func grantRow(g store.Grant, conv string, now time.Time) []any {
	if g.ID == "" {
		g.ID = NewID()
	}
	created := now
	if !g.CreatedAt.IsZero() {
		created = ts(g.CreatedAt)
	}
	if conv == "" {
		conv = g.ConversationID
	}
	return []any{g.ID, g.UserID, g.Tool, g.Scope, conv, g.ToolCallID, g.CreatedBy, created, ts(g.ExpiresAt), tsPtr(g.RevokedAt),
		g.ArgsScope, g.ArgsHash}
}

func scanAudit(r Rows) (store.AuditRecord, error) {
	var a store.AuditRecord
	var detail string
	err := r.Scan(&a.ID, &a.ConversationID, &a.ToolCallID, &a.Tool, &a.ActorID, &a.Action, &a.Reason, &a.ArgsHash, &detail, &a.At,
		&a.Seq, &a.PrevHash, &a.Hash, &a.KeyID)
	if detail != "" {
		a.Detail = []byte(detail)
	}
	return a, err
}

func scanGrant(r Rows) (store.Grant, error) {
	var g store.Grant
	err := r.Scan(&g.ID, &g.UserID, &g.Tool, &g.Scope, &g.ConversationID, &g.ToolCallID, &g.CreatedBy, &g.CreatedAt, &g.ExpiresAt, &g.RevokedAt,
		&g.ArgsScope, &g.ArgsHash)
	return g, err
}

// The audit chain (store/auditkey.go). Records are linked in Go, under the store's key, in the
// transaction that inserts them, after the chain's head: on PostgreSQL the head is read under a
// transaction-level advisory lock (Dialect.ChainLock), so writers from several processes chain
// one after another — a writer waits there until the one before it commits, then reads its head
// (READ COMMITTED: a statement sees what is committed when it starts); on SQLite the transaction
// holds the only write lock. The database cannot link a record itself: it does not have the key.

// AuditHeadSQL reads the chain's head: its newest record's place and hash (no row: empty chain).
const AuditHeadSQL = `SELECT chain_seq, hash FROM audit WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1`

// auditChainedInsert inserts records already linked (ChainAuditRows' rows).
const auditChainedInsert = `INSERT INTO audit (conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, at, detail, chain_seq, prev_hash, hash, key_id)`

// AuditChainedTypes are the column types of ChainAuditRows' rows, in order.
var AuditChainedTypes = []string{"text", "text", "text", "text", "text", "text", "text", "timestamptz", "text", "bigint", "text", "text", "text"}

// AuditInsertUnnest inserts ChainAuditRows' rows as one array per column (PostgreSQL).
var AuditInsertUnnest = auditChainedInsert + ` SELECT * FROM ` + unnest(AuditChainedTypes)

// ChainAuditRows links audit rows (Writes.Audit's: conversation, call, tool, actor, action,
// reason, args hash, time, detail) after the head at place seq with hash head, under key: each
// row comes back with its chain_seq, prev_hash, hash and key_id appended (AuditChainedTypes).
// It returns the new head.
func ChainAuditRows(key *store.AuditKey, seq int64, head string, rows [][]any) (out [][]any, newSeq int64, newHead string) {
	out = make([][]any, len(rows))
	for i, row := range rows {
		r := store.AuditRecord{ConversationID: row[0].(string), ToolCallID: row[1].(string), Tool: row[2].(string), ActorID: row[3].(string),
			Action: row[4].(string), Reason: row[5].(string), ArgsHash: row[6].(string), At: row[7].(time.Time), Detail: []byte(row[8].(string))}
		seq++
		r.Seq = seq
		h := key.Link(head, r)
		out[i] = append(slices.Clip(row), seq, head, h, key.ID())
		head = h
	}
	return out, seq, head
}

// AuditKey is the key the store links audit records with.
func (c *Core) AuditKey() *store.AuditKey { return c.ChainKey }

// SetAuditAnchor sets where the chain's heads go (the stores' WithAuditAnchor), before the store
// is used.
func (c *Core) SetAuditAnchor(a store.AuditAnchor) { c.Anchor = a }

// InitAudit readies the chain's writing: a random key when the store was given none
// (store.RandomAuditKey), and how many records at the chain's start are unkeyed, for the heads
// it anchors. Both stores call it when they open.
func (c *Core) InitAudit(ctx context.Context) error {
	if c.ChainKey == nil {
		c.ChainKey = store.RandomAuditKey()
	}
	var legacy int64
	if err := queryRow(ctx, c.DB, `SELECT COALESCE(max(chain_seq), 0) FROM audit WHERE key_id = ''`, nil, &legacy); err != nil {
		return fmt.Errorf("read the audit chain's unkeyed records: %w", err)
	}
	c.legacy = legacy
	return nil
}

// Anchored gives the store's anchor the head a committed transaction left (seq 0: it wrote no
// audit record), signed.
func (c *Core) Anchored(seq int64, hash string, at time.Time) {
	if seq == 0 || c.Anchor == nil {
		return
	}
	c.Anchor.Anchor(c.ChainKey.SignHead(store.AuditHead{Seq: seq, Hash: hash, Legacy: c.legacy, At: at}))
}

// chainAudit links the audit rows and inserts them, in tx, after the chain's head; it returns
// the new head.
func (c *Core) chainAudit(ctx context.Context, tx Tx, rows [][]any) (seq int64, head string, err error) {
	if len(rows) == 0 {
		return 0, "", nil
	}
	if c.Dialect.ChainLock != "" {
		if _, err := tx.Exec(ctx, c.Dialect.ChainLock); err != nil {
			return 0, "", fmt.Errorf("lock the audit chain: %w", err)
		}
	}
	if err := queryRow(ctx, tx, AuditHeadSQL, nil, &seq, &head); err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, "", fmt.Errorf("read the audit chain's head: %w", err)
	}
	chained, seq, head := ChainAuditRows(c.ChainKey, seq, head, rows)
	for _, st := range insertMany(nil, auditChainedInsert, "", chained) {
		if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
			return 0, "", err
		}
	}
	return seq, head, nil
}

// ListAudit implements store.Store: newest first in chain order (unchained records, which only
// a database migrated from before the chain can hold until its next write, come first).
func (c *Core) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditRecord, error) {
	q := `SELECT ` + auditCols + ` FROM audit WHERE 1 = 1`
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		q += ` AND ` + cond + ` $` + strconv.Itoa(len(args))
	}
	if f.ConversationID != "" {
		add("conversation_id =", f.ConversationID)
	}
	if f.ActorID != "" {
		add("actor_id =", f.ActorID)
	}
	if f.Action != "" {
		add("action =", f.Action)
	}
	if f.Tool != "" {
		add("tool =", f.Tool)
	}
	if f.BeforeSeq > 0 {
		add("chain_seq <", f.BeforeSeq)
	}
	args = append(args, int64(limitOrAll(f.Limit)))
	q += ` ORDER BY COALESCE(chain_seq, 9223372036854775807) DESC, id DESC LIMIT $` + strconv.Itoa(len(args))
	as, err := queryAll(ctx, c.DB, q, args, scanAudit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return as, nil
}

// AuditChain implements store.Store.
func (c *Core) AuditChain(ctx context.Context, afterSeq int64, limit int) ([]store.AuditRecord, error) {
	as, err := queryAll(ctx, c.DB, `SELECT `+auditCols+` FROM audit WHERE chain_seq > $1 ORDER BY chain_seq LIMIT $2`,
		[]any{afterSeq, int64(limitOrAll(limit))}, scanAudit)
	if err != nil {
		return nil, fmt.Errorf("read the audit chain after %d: %w", afterSeq, err)
	}
	return as, nil
}

// AppendAudit implements store.Store.
func (c *Core) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	var seq int64
	var head string
	err := c.inTx(ctx, func(tx Tx) (err error) {
		seq, head, err = c.writeAudit(ctx, tx, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("append audit records: %w", err)
	}
	c.Anchored(seq, head, c.now())
	return nil
}

// auditRow is a record's row as Writes.Audit holds it, stamped now unless it has a time.
func auditRow(conv string, a store.AuditRecord, now time.Time) []any {
	at := now
	if !a.At.IsZero() {
		at = ts(a.At)
	}
	return []any{conv, a.ToolCallID, a.Tool, a.ActorID, a.Action, a.Reason, a.ArgsHash, at, string(a.Detail)}
}

// writeAudit links recs into the chain and inserts them, in tx; it returns the new head.
func (c *Core) writeAudit(ctx context.Context, tx Tx, recs []store.AuditRecord) (int64, string, error) {
	now := c.now()
	rows := make([][]any, len(recs))
	for i, a := range recs {
		rows[i] = auditRow(a.ConversationID, a, now)
	}
	return c.chainAudit(ctx, tx, rows)
}

// ActiveGrant implements store.Store. An exact grant covers only the arguments it was made for;
// an empty argsHash (no arguments to compare) matches no exact grant.
func (c *Core) ActiveGrant(ctx context.Context, userID, conversationID, tool, argsHash string, now time.Time) (store.Grant, error) {
	gs, err := queryAll(ctx, c.DB, `SELECT `+grantCols+` FROM grants
		WHERE user_id = $1 AND tool = $2 AND revoked_at IS NULL AND expires_at > $3
		  AND (scope = $4 OR (scope = $5 AND conversation_id = $6))
		  AND (args_scope = $7 OR (args_scope = $8 AND args_hash = $9 AND args_hash <> ''))
		ORDER BY created_at DESC, id LIMIT 1`,
		[]any{userID, tool, ts(now), store.GrantUser, store.GrantConversation, conversationID,
			store.GrantArgsAny, store.GrantArgsExact, argsHash}, scanGrant)
	if err != nil {
		return store.Grant{}, fmt.Errorf("find a grant of %s for %s: %w", tool, userID, err)
	}
	if len(gs) == 0 {
		return store.Grant{}, fmt.Errorf("grant of %s for %s: %w", tool, userID, store.ErrNotFound)
	}
	return gs[0], nil
}

// ListGrants implements store.Store.
func (c *Core) ListGrants(ctx context.Context, userID string, now time.Time) ([]store.Grant, error) {
	gs, err := queryAll(ctx, c.DB, `SELECT `+grantCols+` FROM grants WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2
		ORDER BY created_at DESC, id`, []any{userID, ts(now)}, scanGrant)
	if err != nil {
		return nil, fmt.Errorf("list grants of %s: %w", userID, err)
	}
	return gs, nil
}

// AllGrants implements store.Store.
func (c *Core) AllGrants(ctx context.Context, now time.Time, limit int) ([]store.Grant, error) {
	gs, err := queryAll(ctx, c.DB, `SELECT `+grantCols+` FROM grants WHERE revoked_at IS NULL AND expires_at > $1
		ORDER BY created_at DESC, id LIMIT $2`, []any{ts(now), int64(limitOrAll(limit))}, scanGrant)
	if err != nil {
		return nil, fmt.Errorf("list every grant: %w", err)
	}
	return gs, nil
}

// GrantByID implements store.Store.
func (c *Core) GrantByID(ctx context.Context, id string) (store.Grant, error) {
	gs, err := queryAll(ctx, c.DB, `SELECT `+grantCols+` FROM grants WHERE id = $1`, []any{id}, scanGrant)
	if err != nil {
		return store.Grant{}, fmt.Errorf("read grant %q: %w", id, err)
	}
	if len(gs) == 0 {
		return store.Grant{}, fmt.Errorf("grant %q: %w", id, store.ErrNotFound)
	}
	return gs[0], nil
}

// RevokeGrant implements store.Store.
func (c *Core) RevokeGrant(ctx context.Context, userID, id string, now time.Time, audit store.AuditRecord) error {
	var seq int64
	var head string
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE grants SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL AND expires_at > $1`,
			ts(now), id, userID)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		seq, head, err = c.writeAudit(ctx, tx, []store.AuditRecord{audit})
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("revoke grant %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("revoke grant %q: %w", id, err)
	}
	c.Anchored(seq, head, c.now())
	return nil
}

const claimCols = `conversation_id, tool_call_id, user_id, claimed_at, expires_at`

func scanClaim(r Rows) (store.Claim, error) {
	var c store.Claim
	err := r.Scan(&c.ConversationID, &c.ToolCallID, &c.UserID, &c.ClaimedAt, &c.ExpiresAt)
	return c, err
}

// ClaimCall implements store.Store. The upsert takes the row when it is free, dead (expired at
// the claim's time) or the claimer's own; otherwise it changes nothing and the holder's claim is
// read back. Dead rows of other calls are swept in the same transaction, so the table holds at
// most the live claims and the dead ones of calls nobody claimed since.
func (c *Core) ClaimCall(ctx context.Context, cl store.Claim) (store.Claim, error) {
	if !cl.ExpiresAt.After(cl.ClaimedAt) {
		return store.Claim{}, errors.New("claim a call: it must expire after it is taken")
	}
	cl.ClaimedAt, cl.ExpiresAt = ts(cl.ClaimedAt), ts(cl.ExpiresAt)
	var held store.Claim
	err := c.inTx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM inbox_claims WHERE expires_at <= $1`, cl.ClaimedAt); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, `INSERT INTO inbox_claims (`+claimCols+`) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET user_id = excluded.user_id,
				claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
			WHERE inbox_claims.user_id = excluded.user_id OR inbox_claims.expires_at <= excluded.claimed_at`,
			cl.ConversationID, cl.ToolCallID, cl.UserID, cl.ClaimedAt, cl.ExpiresAt)
		if err != nil {
			return err
		}
		if n == 1 {
			held = cl
			return nil
		}
		if err := queryRow(ctx, tx, `SELECT `+claimCols+` FROM inbox_claims WHERE conversation_id = $1 AND tool_call_id = $2`,
			[]any{cl.ConversationID, cl.ToolCallID}, &held.ConversationID, &held.ToolCallID, &held.UserID, &held.ClaimedAt, &held.ExpiresAt); err != nil {
			return err
		}
		return store.ErrConflict
	})
	if errors.Is(err, store.ErrConflict) {
		return held, fmt.Errorf("claim call %q: held by %s: %w", cl.ToolCallID, held.UserID, store.ErrConflict)
	}
	if err != nil {
		return store.Claim{}, fmt.Errorf("claim call %q: %w", cl.ToolCallID, err)
	}
	return held, nil
}

// ReleaseClaim implements store.Store.
func (c *Core) ReleaseClaim(ctx context.Context, conversationID, toolCallID, userID string) error {
	if _, err := c.DB.Exec(ctx, `DELETE FROM inbox_claims WHERE conversation_id = $1 AND tool_call_id = $2 AND user_id = $3`,
		conversationID, toolCallID, userID); err != nil {
		return fmt.Errorf("release the claim of call %q: %w", toolCallID, err)
	}
	return nil
}

// ListClaims implements store.Store, soonest to expire first.
func (c *Core) ListClaims(ctx context.Context, now time.Time) ([]store.Claim, error) {
	cs, err := queryAll(ctx, c.DB, `SELECT `+claimCols+` FROM inbox_claims WHERE expires_at > $1 ORDER BY expires_at, conversation_id, tool_call_id`,
		[]any{ts(now)}, scanClaim)
	if err != nil {
		return nil, fmt.Errorf("list inbox claims: %w", err)
	}
	return cs, nil
}

// notifyRow is a queued notification's row in the column order of notifyInsert: due at once
// unless it says otherwise.
func notifyRow(m store.NotifyMessage, now time.Time) []any {
	id := m.ID
	if id == "" {
		id = "ntf_" + NewID()
	}
	next := now
	if !m.NextAttemptAt.IsZero() {
		next = ts(m.NextAttemptAt)
	}
	return []any{id, string(m.Payload), now, next}
}

// EnqueueNotify implements store.Store.
func (c *Core) EnqueueNotify(ctx context.Context, msgs ...store.NotifyMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	now := c.now()
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		rows[i] = notifyRow(m, now)
	}
	err := c.inTx(ctx, func(tx Tx) error {
		for _, st := range insertMany(nil, notifyInsert, "", rows) {
			if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue notifications: %w", err)
	}
	return nil
}

const notifyCols = `id, payload, created_at, attempts, next_attempt_at, last_error`

// ClaimNotify implements store.Store. The inner SELECT skips rows another transaction has
// locked (PostgreSQL: FOR UPDATE SKIP LOCKED), so claimers running at once take different rows;
// the lease hides a claimed row from later claimers until it runs out (a claimer that died).
func (c *Core) ClaimNotify(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.NotifyMessage, error) {
	if lease <= 0 {
		return nil, errors.New("claim notifications: lease must be positive")
	}
	now = ts(now)
	var out []store.NotifyMessage
	err := c.inTx(ctx, func(tx Tx) error {
		var err error
		out, err = queryAll(ctx, tx, `UPDATE notify_outbox SET claimed_until = $1
			FROM (SELECT id AS due_id FROM notify_outbox
			      WHERE next_attempt_at <= $2 AND (claimed_until IS NULL OR claimed_until <= $2)
			      ORDER BY next_attempt_at, id LIMIT $3 `+c.Dialect.SkipLocked+`) AS due
			WHERE id = due.due_id
			RETURNING `+notifyCols,
			[]any{ts(now.Add(lease)), now, int64(limitOrAll(limit))}, func(r Rows) (store.NotifyMessage, error) {
				var m store.NotifyMessage
				var payload string
				err := r.Scan(&m.ID, &payload, &m.CreatedAt, &m.Attempts, &m.NextAttemptAt, &m.LastError)
				m.Payload = []byte(payload)
				return m, err
			})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim notifications: %w", err)
	}
	slices.SortFunc(out, func(a, b store.NotifyMessage) int {
		if d := a.NextAttemptAt.Compare(b.NextAttemptAt); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// CompleteNotify implements store.Store; a missing message is not an error.
func (c *Core) CompleteNotify(ctx context.Context, id string) error {
	if _, err := c.DB.Exec(ctx, `DELETE FROM notify_outbox WHERE id = $1`, id); err != nil {
		return fmt.Errorf("complete notification %q: %w", id, err)
	}
	return nil
}

// ReleaseNotify implements store.Store; a missing message is not an error.
func (c *Core) ReleaseNotify(ctx context.Context, id string) error {
	if _, err := c.DB.Exec(ctx, `UPDATE notify_outbox SET claimed_until = NULL WHERE id = $1`, id); err != nil {
		return fmt.Errorf("release notification %q: %w", id, err)
	}
	return nil
}

// RetryNotify implements store.Store; a missing message is not an error.
func (c *Core) RetryNotify(ctx context.Context, id string, next time.Time, lastError string) error {
	if len(lastError) > 1000 {
		lastError = lastError[:1000]
	}
	if _, err := c.DB.Exec(ctx, `UPDATE notify_outbox SET attempts = attempts + 1, next_attempt_at = $1, claimed_until = NULL, last_error = $2 WHERE id = $3`,
		ts(next), strings.ToValidUTF8(lastError, "?"), id); err != nil {
		return fmt.Errorf("retry notification %q: %w", id, err)
	}
	return nil
}
