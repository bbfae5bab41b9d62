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
	auditCols    = `id, conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, detail, at, COALESCE(chain_seq, 0), prev_hash, hash`
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
		&a.Seq, &a.PrevHash, &a.Hash)
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

// chainAudit places the audit records tx wrote (and any older unchained ones) in the chain, in
// id order, after its head. On PostgreSQL a function does it (Dialect.ChainSQL; migration 008);
// on SQLite the transaction holds the only write lock, so reading the head here is safe.
func (c *Core) chainAudit(ctx context.Context, tx Tx) error {
	if c.Dialect.ChainSQL != "" {
		if _, err := tx.Exec(ctx, c.Dialect.ChainSQL); err != nil {
			return fmt.Errorf("chain audit records: %w", err)
		}
		return nil
	}
	var head store.AuditRecord
	heads, err := queryAll(ctx, tx, `SELECT `+auditCols+` FROM audit WHERE chain_seq IS NOT NULL ORDER BY chain_seq DESC LIMIT 1`, nil, scanAudit)
	if err != nil {
		return fmt.Errorf("read the audit chain's head: %w", err)
	}
	if len(heads) > 0 {
		head = heads[0]
	}
	todo, err := queryAll(ctx, tx, `SELECT `+auditCols+` FROM audit WHERE chain_seq IS NULL ORDER BY id`, nil, scanAudit)
	if err != nil {
		return fmt.Errorf("read unchained audit records: %w", err)
	}
	for _, r := range todo {
		r.Seq, r.PrevHash = head.Seq+1, head.Hash
		r.Hash = store.AuditHash(r.PrevHash, r)
		if _, err := tx.Exec(ctx, `UPDATE audit SET chain_seq = $1, prev_hash = $2, hash = $3 WHERE id = $4`, r.Seq, r.PrevHash, r.Hash, r.ID); err != nil {
			return fmt.Errorf("chain audit record %d: %w", r.ID, err)
		}
		head = r
	}
	return nil
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
	err := c.inTx(ctx, func(tx Tx) error { return c.writeAudit(ctx, tx, recs) })
	if err != nil {
		return fmt.Errorf("append audit records: %w", err)
	}
	return nil
}

// writeAudit inserts recs and chains them, in tx.
func (c *Core) writeAudit(ctx context.Context, tx Tx, recs []store.AuditRecord) error {
	now := c.now()
	for _, a := range recs {
		at := now
		if !a.At.IsZero() {
			at = ts(a.At)
		}
		if _, err := tx.Exec(ctx, auditInsert+` VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
			a.ConversationID, a.ToolCallID, a.Tool, a.ActorID, a.Action, a.Reason, a.ArgsHash, at, string(a.Detail)); err != nil {
			return err
		}
	}
	return c.chainAudit(ctx, tx)
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
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE grants SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL AND expires_at > $1`,
			ts(now), id, userID)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		return c.writeAudit(ctx, tx, []store.AuditRecord{audit})
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("revoke grant %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("revoke grant %q: %w", id, err)
	}
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
