package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"parley/internal/store"
)

// ---- the audit trail's hash chain and grants ----

const (
	auditCols    = `id, conversation_id, tool_call_id, tool, actor_id, action, reason, args_hash, detail, at, COALESCE(chain_seq, 0), prev_hash, hash`
	grantCols    = `id, user_id, tool, scope, conversation_id, tool_call_id, created_by, created_at, expires_at, revoked_at`
	grantsInsert = `INSERT INTO grants (` + grantCols + `)`
)

var grantTypes = []string{"text", "text", "text", "text", "text", "text", "text", "timestamptz", "timestamptz", "timestamptz"}

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
	return []any{g.ID, g.UserID, g.Tool, g.Scope, conv, g.ToolCallID, g.CreatedBy, created, ts(g.ExpiresAt), tsPtr(g.RevokedAt)}
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
	err := r.Scan(&g.ID, &g.UserID, &g.Tool, &g.Scope, &g.ConversationID, &g.ToolCallID, &g.CreatedBy, &g.CreatedAt, &g.ExpiresAt, &g.RevokedAt)
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

// ActiveGrant implements store.Store.
func (c *Core) ActiveGrant(ctx context.Context, userID, conversationID, tool string, now time.Time) (store.Grant, error) {
	gs, err := queryAll(ctx, c.DB, `SELECT `+grantCols+` FROM grants
		WHERE user_id = $1 AND tool = $2 AND revoked_at IS NULL AND expires_at > $3
		  AND (scope = $4 OR (scope = $5 AND conversation_id = $6))
		ORDER BY created_at DESC, id LIMIT 1`,
		[]any{userID, tool, ts(now), store.GrantUser, store.GrantConversation, conversationID}, scanGrant)
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
