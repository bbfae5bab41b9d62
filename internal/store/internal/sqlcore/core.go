package sqlcore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
)

// Core implements store.Store over an adapted DB.
type Core struct {
	DB      DB
	Dialect Dialect
	Clock   clock.Clock
	// ChainKey links audit records (nil until InitAudit: a random key); Anchor, when set, takes
	// the chain's head after each commit that moved it (governance.go).
	ChainKey *store.AuditKey
	Anchor   store.AuditAnchor
	// SearchTimeout bounds FindConversations (0: store.SearchTimeout); tests shorten it.
	SearchTimeout time.Duration
	legacy        int64 // unkeyed records at the chain's start (InitAudit)

	mu   sync.Mutex
	last time.Time // the newest stamp handed out
}

// Stamp is the time a write is stamped with now: see now.
func (c *Core) Stamp() time.Time { return c.now() }

// now stamps a write: the clock's time, UTC, in microseconds, and strictly after the previous
// stamp of this handle so that "newest first" orders are total even within one microsecond.
func (c *Core) now() time.Time {
	t := ts(c.Clock.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.After(c.last) {
		t = c.last.Add(time.Microsecond)
	}
	c.last = t
	return t
}

// queryRow scans the first row into dest; no row → store.ErrNotFound.
func queryRow(ctx context.Context, q Querier, sql string, args []any, dest ...any) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return store.ErrNotFound
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// queryAll scans every row with scan.
func queryAll[T any](ctx context.Context, q Querier, sql string, args []any, scan func(Rows) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// inTx runs f in a write transaction, committing when it returns nil and rolling back otherwise.
func (c *Core) inTx(ctx context.Context, f func(Tx) error) (err error) {
	tx, err := c.DB.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the error that made us roll back is the one to report
		}
	}()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// values builds "($1,$2),($3,$4)…" for n rows of width columns, numbering from first.
func values(rows, width, first int) string {
	var b strings.Builder
	p := first
	for r := range rows {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for col := range width {
			if col > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// maxParams keeps one statement under both drivers' bound-parameter limits.
const maxParams = 30000

// Stmt is one statement with its arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// insertMany plans head + VALUES … + tail for rows, in chunks under maxParams.
func insertMany(out []Stmt, head, tail string, rows [][]any) []Stmt {
	if len(rows) == 0 {
		return out
	}
	width := len(rows[0])
	per := max(1, maxParams/width)
	for chunk := range slices.Chunk(rows, per) {
		args := make([]any, 0, len(chunk)*width)
		for _, r := range chunk {
			args = append(args, r...)
		}
		out = append(out, Stmt{head + " VALUES " + values(len(chunk), width, 1) + " " + tail, args})
	}
	return out
}

// placeholders returns "$first,…" for n values.
func placeholders(n, first int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "$" + strconv.Itoa(first+i)
	}
	return strings.Join(parts, ",")
}

// lastByKey keeps the last element for each key, in first-seen order: several upserts of one
// key in one batch mean its last value.
func lastByKey[T any](xs []T, key func(T) string) []T {
	idx := make(map[string]int, len(xs))
	var out []T
	for _, x := range xs {
		k := key(x)
		if i, ok := idx[k]; ok {
			out[i] = x
			continue
		}
		idx[k] = len(out)
		out = append(out, x)
	}
	return out
}

func limitOrAll(n int) int {
	if n <= 0 {
		return math.MaxInt32
	}
	return n
}

// ---- users, sessions, tokens, settings ----

const userCols = `id, name, role, password_hash, created_at`

// userReadCols are userCols and what an account gets after it is created (disabled).
const userReadCols = userCols + `, disabled`

func scanUser(r Rows) (store.User, error) {
	var u store.User
	var role string
	err := r.Scan(&u.ID, &u.Name, &role, &u.PasswordHash, &u.CreatedAt, &u.Disabled)
	u.Role = store.Role(role)
	return u, err
}

// CreateUser implements store.Store.
func (c *Core) CreateUser(ctx context.Context, u store.User) (store.User, error) {
	if u.ID == "" {
		u.ID = NewID()
	}
	if u.Role == "" {
		u.Role = store.RoleMember
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = c.now()
	}
	u.CreatedAt = ts(u.CreatedAt)
	if _, err := c.DB.Exec(ctx, `INSERT INTO users (`+userCols+`) VALUES ($1,$2,$3,$4,$5)`,
		u.ID, u.Name, string(u.Role), u.PasswordHash, u.CreatedAt); err != nil {
		return store.User{}, fmt.Errorf("create user %q: %w", u.Name, err)
	}
	return u, nil
}

// CreateFirstAdmin implements store.Store: the bootstrap marker (a settings row, unique) and
// the admin are written in one transaction, which also finds the users table empty, so two
// processes racing to bootstrap one database make one admin.
func (c *Core) CreateFirstAdmin(ctx context.Context, u store.User) (store.User, error) {
	if u.ID == "" {
		u.ID = NewID()
	}
	u.Role = store.RoleAdmin
	if u.CreatedAt.IsZero() {
		u.CreatedAt = c.now()
	}
	u.CreatedAt = ts(u.CreatedAt)
	err := c.inTx(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ('bootstrap_admin', $1)`, u.ID); err != nil {
			return err // a second bootstrap: the unique key refuses it (ErrConflict)
		}
		var n int
		if err := queryRow(ctx, tx, `SELECT count(*) FROM users`, nil, &n); err != nil {
			return err
		}
		if n > 0 {
			return store.ErrConflict
		}
		_, err := tx.Exec(ctx, `INSERT INTO users (`+userCols+`) VALUES ($1,$2,$3,$4,$5)`,
			u.ID, u.Name, string(u.Role), u.PasswordHash, u.CreatedAt)
		return err
	})
	if err != nil {
		return store.User{}, fmt.Errorf("create the first admin %q: %w", u.Name, err)
	}
	return u, nil
}

// UserByID implements store.Store.
func (c *Core) UserByID(ctx context.Context, id string) (store.User, error) {
	return c.oneUser(ctx, `WHERE id = $1`, id)
}

// UserByName implements store.Store.
func (c *Core) UserByName(ctx context.Context, name string) (store.User, error) {
	return c.oneUser(ctx, `WHERE name = $1`, name)
}

func (c *Core) oneUser(ctx context.Context, where, arg string) (store.User, error) {
	us, err := queryAll(ctx, c.DB, `SELECT `+userReadCols+` FROM users `+where, []any{arg}, scanUser)
	if err != nil {
		return store.User{}, fmt.Errorf("user %q: %w", arg, err)
	}
	if len(us) == 0 {
		return store.User{}, fmt.Errorf("user %q: %w", arg, store.ErrNotFound)
	}
	return us[0], nil
}

// ListUsers implements store.Store: oldest first.
func (c *Core) ListUsers(ctx context.Context) ([]store.User, error) {
	us, err := queryAll(ctx, c.DB, `SELECT `+userReadCols+` FROM users ORDER BY created_at, name`, nil, scanUser)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return us, nil
}

// CountUsers implements store.Store.
func (c *Core) CountUsers(ctx context.Context) (int, error) {
	var n int64
	if err := queryRow(ctx, c.DB, `SELECT count(*) FROM users`, nil, &n); err != nil {
		return 0, fmt.Errorf("count users: %w", err)
	}
	return int(n), nil
}

// SetUserRole implements store.Store.
func (c *Core) SetUserRole(ctx context.Context, id string, role store.Role) error {
	n, err := c.DB.Exec(ctx, `UPDATE users SET role = $1 WHERE id = $2`, string(role), id)
	if err != nil {
		return fmt.Errorf("set role of user %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("set role of user %q: %w", id, store.ErrNotFound)
	}
	return nil
}

// SetUserDisabled implements store.Store. The check that an enabled admin remains and the
// write are one transaction; two admins disabling each other at the same moment on
// PostgreSQL could both pass it (read committed), which the web layer's refusal to disable
// oneself leaves as the only way to lose the last admin.
func (c *Core) SetUserDisabled(ctx context.Context, id string, disabled bool) error {
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE users SET disabled = $1 WHERE id = $2`, disabled, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		if !disabled {
			return nil
		}
		var admins int64
		if err := queryRow(ctx, tx, `SELECT count(*) FROM users WHERE role = $1 AND NOT disabled`, []any{string(store.RoleAdmin)}, &admins); err != nil {
			return err
		}
		if admins == 0 {
			return store.ErrConflict
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set user %q disabled=%v: %w", id, disabled, err)
	}
	return nil
}

// CreateSession implements store.Store.
func (c *Core) CreateSession(ctx context.Context, s store.Session) error {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = c.now()
	}
	if _, err := c.DB.Exec(ctx, `INSERT INTO sessions (token_hash, user_id, csrf, expires_at, created_at) VALUES ($1,$2,$3,$4,$5)`,
		s.TokenHash, s.UserID, s.CSRF, ts(s.ExpiresAt), ts(s.CreatedAt)); err != nil {
		return fmt.Errorf("create session for user %q: %w", s.UserID, err)
	}
	return nil
}

// SessionByHash implements store.Store: an expired session is not found.
func (c *Core) SessionByHash(ctx context.Context, hash []byte) (store.Session, error) {
	var s store.Session
	err := queryRow(ctx, c.DB, `SELECT token_hash, user_id, csrf, expires_at, created_at FROM sessions WHERE token_hash = $1 AND expires_at > $2`,
		[]any{hash, ts(c.Clock.Now())}, &s.TokenHash, &s.UserID, &s.CSRF, &s.ExpiresAt, &s.CreatedAt)
	if err != nil {
		return store.Session{}, fmt.Errorf("session: %w", err)
	}
	return s, nil
}

// DeleteSession implements store.Store; deleting a missing session is not an error.
func (c *Core) DeleteSession(ctx context.Context, hash []byte) error {
	if _, err := c.DB.Exec(ctx, `DELETE FROM sessions WHERE token_hash = $1`, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// ExtendSession implements store.Store.
func (c *Core) ExtendSession(ctx context.Context, hash []byte, expiresAt time.Time) error {
	if _, err := c.DB.Exec(ctx, `UPDATE sessions SET expires_at = $1 WHERE token_hash = $2`, ts(expiresAt), hash); err != nil {
		return fmt.Errorf("extend session: %w", err)
	}
	return nil
}

// EndUserSessions implements store.Store.
func (c *Core) EndUserSessions(ctx context.Context, userID string, keep []byte) (int, error) {
	q, args := `DELETE FROM sessions WHERE user_id = $1`, []any{userID}
	if keep != nil {
		q, args = q+` AND token_hash <> $2`, append(args, keep)
	}
	n, err := c.DB.Exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("end the sessions of %q: %w", userID, err)
	}
	return int(n), nil
}

// UpdateSignInAttempts implements store.Store: each key's row is made if missing and locked
// (Dialect.ForUpdate), in the keys' sorted order so two sign-ins never wait on each other in a
// circle, then update decides and the rows are written, all in one transaction.
func (c *Core) UpdateSignInAttempts(ctx context.Context, keys []string, update func([]store.SignInAttempts) []store.SignInAttempts) error {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	err := c.inTx(ctx, func(tx Tx) error {
		now := ts(c.now())
		cur := make([]store.SignInAttempts, len(keys))
		for _, i := range order {
			if _, err := tx.Exec(ctx, `INSERT INTO signin_attempts (key, first_at, last_at, failures) VALUES ($1, $2, $2, 0) ON CONFLICT (key) DO NOTHING`, keys[i], now); err != nil {
				return err
			}
			a := &cur[i]
			if err := queryRow(ctx, tx, `SELECT first_at, last_at, failures FROM signin_attempts WHERE key = $1 `+c.Dialect.ForUpdate,
				[]any{keys[i]}, &a.First, &a.Last, &a.Failures); err != nil {
				return err
			}
			if a.Failures == 0 {
				*a = store.SignInAttempts{}
			}
		}
		next := update(slices.Clone(cur))
		if len(next) != len(keys) {
			return fmt.Errorf("update returned %d attempts for %d keys", len(next), len(keys))
		}
		for _, i := range order {
			var err error
			if a := next[i]; a.Failures <= 0 {
				_, err = tx.Exec(ctx, `DELETE FROM signin_attempts WHERE key = $1`, keys[i])
			} else {
				_, err = tx.Exec(ctx, `UPDATE signin_attempts SET first_at = $2, last_at = $3, failures = $4 WHERE key = $1`,
					keys[i], ts(a.First), ts(a.Last), int64(a.Failures))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update sign-in attempts: %w", err)
	}
	return nil
}

// SweepSignInAttempts implements store.Store.
func (c *Core) SweepSignInAttempts(ctx context.Context, since time.Time) (int, error) {
	n, err := c.DB.Exec(ctx, `DELETE FROM signin_attempts WHERE first_at < $1`, ts(since))
	if err != nil {
		return 0, fmt.Errorf("sweep sign-in attempts: %w", err)
	}
	return int(n), nil
}

// PurgeSessions implements store.Store.
func (c *Core) PurgeSessions(ctx context.Context, now time.Time) (int, error) {
	n, err := c.DB.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1`, ts(now))
	if err != nil {
		return 0, fmt.Errorf("purge expired sessions: %w", err)
	}
	return int(n), nil
}

// SetPassword implements store.Store.
func (c *Core) SetPassword(ctx context.Context, userID string, hash []byte) error {
	n, err := c.DB.Exec(ctx, `UPDATE users SET password_hash = $1 WHERE id = $2`, hash, userID)
	if err != nil {
		return fmt.Errorf("set the password of %q: %w", userID, err)
	}
	if n == 0 {
		return fmt.Errorf("set the password of %q: %w", userID, store.ErrNotFound)
	}
	return nil
}

const tokenCols = `id, user_id, name, hash, scope, created_at, expires_at, last_used_at, revoked_at`

func scanToken(r Rows) (store.APIToken, error) {
	var t store.APIToken
	err := r.Scan(&t.ID, &t.UserID, &t.Name, &t.Hash, &t.Scope, &t.CreatedAt, &t.ExpiresAt, &t.LastUsedAt, &t.RevokedAt)
	return t, err
}

// CreateAPIToken implements store.Store. A token without a scope is a full one.
func (c *Core) CreateAPIToken(ctx context.Context, t store.APIToken) (store.APIToken, error) {
	if t.ID == "" {
		t.ID = NewID()
	}
	if t.Scope == "" {
		t.Scope = store.ScopeFull
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = c.now()
	}
	t.CreatedAt = ts(t.CreatedAt)
	if _, err := c.DB.Exec(ctx, `INSERT INTO api_tokens (`+tokenCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
		t.ID, t.UserID, t.Name, t.Hash, t.Scope, t.CreatedAt, tsPtr(t.ExpiresAt), tsPtr(t.LastUsedAt), tsPtr(t.RevokedAt)); err != nil {
		return store.APIToken{}, fmt.Errorf("create API token %q: %w", t.Name, err)
	}
	return c.tokenBy(ctx, `id = $1`, t.ID)
}

func (c *Core) tokenBy(ctx context.Context, where string, args ...any) (store.APIToken, error) {
	ts, err := queryAll(ctx, c.DB, `SELECT `+tokenCols+` FROM api_tokens WHERE `+where, args, scanToken)
	if err != nil {
		return store.APIToken{}, fmt.Errorf("API token: %w", err)
	}
	if len(ts) == 0 {
		return store.APIToken{}, fmt.Errorf("API token: %w", store.ErrNotFound)
	}
	return ts[0], nil
}

// APITokenByHash implements store.Store: a revoked or expired token is not found.
func (c *Core) APITokenByHash(ctx context.Context, hash []byte) (store.APIToken, error) {
	return c.tokenBy(ctx, `hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`, hash, ts(c.Clock.Now()))
}

// ListAPITokens implements store.Store: the user's tokens, revoked ones included, newest first.
func (c *Core) ListAPITokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	ts, err := queryAll(ctx, c.DB, `SELECT `+tokenCols+` FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id`, []any{userID}, scanToken)
	if err != nil {
		return nil, fmt.Errorf("list API tokens of user %q: %w", userID, err)
	}
	return ts, nil
}

// RevokeAPIToken implements store.Store. Revoking twice keeps the first revocation time;
// another user's token or a missing one is store.ErrNotFound.
func (c *Core) RevokeAPIToken(ctx context.Context, userID, id string) error {
	n, err := c.DB.Exec(ctx, `UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE user_id = $2 AND id = $3`, c.now(), userID, id)
	if err != nil {
		return fmt.Errorf("revoke API token %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("revoke API token %q: %w", id, store.ErrNotFound)
	}
	return nil
}

// TouchAPIToken implements store.Store. Most calls change nothing (the token was used within
// store.TokenTouchEvery), and an UPDATE that matches no row writes nothing.
func (c *Core) TouchAPIToken(ctx context.Context, id string) error {
	now := c.now()
	if _, err := c.DB.Exec(ctx, `UPDATE api_tokens SET last_used_at = $1 WHERE id = $2 AND revoked_at IS NULL AND (last_used_at IS NULL OR last_used_at <= $3)`,
		now, id, ts(now.Add(-store.TokenTouchEvery))); err != nil {
		return fmt.Errorf("touch API token %q: %w", id, err)
	}
	return nil
}

// GetSetting implements store.Store.
func (c *Core) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	if err := queryRow(ctx, c.DB, `SELECT value FROM settings WHERE key = $1`, []any{key}, &v); err != nil {
		return "", fmt.Errorf("setting %q: %w", key, err)
	}
	return v, nil
}

// SetSetting implements store.Store.
func (c *Core) SetSetting(ctx context.Context, key, value string) error {
	if _, err := c.DB.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1,$2) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
		return fmt.Errorf("set setting %q: %w", key, err)
	}
	return nil
}

// ---- invitations ----

const invitationCols = `id, hash, role, created_by, created_at, expires_at, used_at, COALESCE(used_by, ''), revoked_at`

func scanInvitation(r Rows) (store.Invitation, error) {
	var inv store.Invitation
	var role string
	err := r.Scan(&inv.ID, &inv.Hash, &role, &inv.CreatedBy, &inv.CreatedAt, &inv.ExpiresAt, &inv.UsedAt, &inv.UsedBy, &inv.RevokedAt)
	inv.Role = store.Role(role)
	return inv, err
}

// CreateInvitation implements store.Store.
func (c *Core) CreateInvitation(ctx context.Context, inv store.Invitation) (store.Invitation, error) {
	if inv.ID == "" {
		inv.ID = NewID()
	}
	if inv.Role == "" {
		inv.Role = store.RoleMember
	}
	if inv.CreatedAt.IsZero() {
		inv.CreatedAt = c.now()
	}
	if _, err := c.DB.Exec(ctx, `INSERT INTO invitations (id, hash, role, created_by, created_at, expires_at) VALUES ($1,$2,$3,$4,$5,$6)`,
		inv.ID, inv.Hash, string(inv.Role), inv.CreatedBy, ts(inv.CreatedAt), ts(inv.ExpiresAt)); err != nil {
		return store.Invitation{}, fmt.Errorf("create invitation: %w", err)
	}
	return c.invitationBy(ctx, `id = $1`, inv.ID)
}

func (c *Core) invitationBy(ctx context.Context, where string, arg any) (store.Invitation, error) {
	list, err := queryAll(ctx, c.DB, `SELECT `+invitationCols+` FROM invitations WHERE `+where, []any{arg}, scanInvitation)
	if err != nil {
		return store.Invitation{}, fmt.Errorf("invitation: %w", err)
	}
	if len(list) == 0 {
		return store.Invitation{}, fmt.Errorf("invitation: %w", store.ErrNotFound)
	}
	return list[0], nil
}

// InvitationByHash implements store.Store.
func (c *Core) InvitationByHash(ctx context.Context, hash []byte) (store.Invitation, error) {
	return c.invitationBy(ctx, `hash = $1`, hash)
}

// ListInvitations implements store.Store.
func (c *Core) ListInvitations(ctx context.Context) ([]store.Invitation, error) {
	list, err := queryAll(ctx, c.DB, `SELECT `+invitationCols+` FROM invitations ORDER BY created_at DESC, id`, nil, scanInvitation)
	if err != nil {
		return nil, fmt.Errorf("list invitations: %w", err)
	}
	return list, nil
}

// RevokeInvitation implements store.Store.
func (c *Core) RevokeInvitation(ctx context.Context, id string) error {
	n, err := c.DB.Exec(ctx, `UPDATE invitations SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 AND used_at IS NULL`, c.now(), id)
	if err != nil {
		return fmt.Errorf("revoke invitation %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("revoke invitation %q: %w", id, store.ErrNotFound)
	}
	return nil
}

// RedeemInvitation implements store.Store: the invitation is claimed (a conditional UPDATE
// that only one transaction can win) and the user inserted in the same transaction, so a taken
// name rolls the claim back.
func (c *Core) RedeemInvitation(ctx context.Context, hash []byte, u store.User, now time.Time) (store.User, error) {
	if u.ID == "" {
		u.ID = NewID()
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = c.now()
	}
	u.CreatedAt = ts(u.CreatedAt)
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE invitations SET used_at = $1, used_by = $2
			WHERE hash = $3 AND used_at IS NULL AND revoked_at IS NULL AND expires_at > $4`, ts(now), u.ID, hash, ts(now))
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		var role string
		if err := queryRow(ctx, tx, `SELECT role FROM invitations WHERE hash = $1`, []any{hash}, &role); err != nil {
			return err
		}
		u.Role = store.Role(role)
		_, err = tx.Exec(ctx, `INSERT INTO users (`+userCols+`) VALUES ($1,$2,$3,$4,$5)`,
			u.ID, u.Name, string(u.Role), u.PasswordHash, u.CreatedAt)
		return err
	})
	if err != nil {
		return store.User{}, fmt.Errorf("redeem an invitation as %q: %w", u.Name, err)
	}
	return u, nil
}

// ---- conversations and logs ----

const convCols = `id, owner_id, title, status, last_seq, created_at, updated_at`

func scanConv(r Rows) (store.Conversation, error) {
	var c store.Conversation
	err := r.Scan(&c.ID, &c.OwnerID, &c.Title, &c.Status, &c.LastSeq, &c.CreatedAt, &c.UpdatedAt)
	return c, err
}

// CreateConversation implements store.Store. LastSeq starts at 0 whatever the caller set.
func (c *Core) CreateConversation(ctx context.Context, cv store.Conversation) (store.Conversation, error) {
	if cv.ID == "" {
		cv.ID = NewID()
	}
	if cv.Status == "" {
		cv.Status = store.StatusIdle
	}
	now := c.now()
	cv.LastSeq, cv.CreatedAt, cv.UpdatedAt = 0, now, now
	if _, err := c.DB.Exec(ctx, `INSERT INTO conversations (`+convCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7)`,
		cv.ID, cv.OwnerID, cv.Title, cv.Status, cv.LastSeq, cv.CreatedAt, cv.UpdatedAt); err != nil {
		return store.Conversation{}, fmt.Errorf("create conversation: %w", err)
	}
	return cv, nil
}

// GetConversation implements store.Store.
func (c *Core) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	cs, err := queryAll(ctx, c.DB, `SELECT `+convCols+` FROM conversations WHERE id = $1`, []any{id}, scanConv)
	if err != nil {
		return store.Conversation{}, fmt.Errorf("conversation %q: %w", id, err)
	}
	if len(cs) == 0 {
		return store.Conversation{}, fmt.Errorf("conversation %q: %w", id, store.ErrNotFound)
	}
	return cs[0], nil
}

// ListConversations implements store.Store: the owner's conversations (every one when ownerID
// is empty), most recently updated first.
func (c *Core) ListConversations(ctx context.Context, ownerID string) ([]store.Conversation, error) {
	q := `SELECT ` + convCols + ` FROM conversations`
	var args []any
	if ownerID != "" {
		q += ` WHERE owner_id = $1`
		args = append(args, ownerID)
	}
	cs, err := queryAll(ctx, c.DB, q+` ORDER BY updated_at DESC, created_at DESC, id`, args, scanConv)
	if err != nil {
		return nil, fmt.Errorf("list conversations: %w", err)
	}
	return cs, nil
}

// ListActive implements store.Store. The status is a literal, not a parameter: the partial
// index conversations_active (WHERE status <> 'idle') serves only queries whose condition
// implies its own, which a generic plan's "status <> $1" does not.
func (c *Core) ListActive(ctx context.Context) ([]store.Conversation, error) {
	cs, err := queryAll(ctx, c.DB, `SELECT `+convCols+` FROM conversations WHERE status <> '`+store.StatusIdle+`' ORDER BY updated_at, id`, nil, scanConv)
	if err != nil {
		return nil, fmt.Errorf("list active conversations: %w", err)
	}
	return cs, nil
}

// AdvanceSQL moves a conversation's log from $5 to $1 (also stamping $2 and setting a non-empty
// status $3) only if the log is at $5; it changes nothing otherwise.
const AdvanceSQL = `UPDATE conversations SET last_seq = $1, updated_at = $2, status = COALESCE(NULLIF($3, ''), status) WHERE id = $4 AND last_seq = $5`

// Append implements store.Store. Everything in b belongs to conversationID whatever its rows
// say. Within one batch, removals (Cancel, DoneSteps) apply before Schedule and Steps, and
// a call, timer or step listed twice takes its last value. A ToolCall is upserted whole: every
// field is replaced except CreatedAt, and Seq when zero; a zero Seq of a call whose tool_call
// entry is in the same batch takes that entry's sequence.
func (c *Core) Append(ctx context.Context, conversationID string, afterSeq int64, b store.Batch) (int64, error) {
	now := c.now()
	last := afterSeq + int64(len(b.Entries))
	var seq int64
	var head string
	err := c.inTx(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, AdvanceSQL, last, now, b.Status, conversationID, afterSeq)
		if err != nil {
			return err
		}
		if n == 0 {
			var at int64
			if err := queryRow(ctx, tx, `SELECT last_seq FROM conversations WHERE id = $1`, []any{conversationID}, &at); err != nil {
				return err
			}
			return fmt.Errorf("log is at %d, not %d: %w", at, afterSeq, store.ErrConflict)
		}
		for _, st := range PlanBatch(conversationID, afterSeq, now, b) {
			if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
				return err
			}
		}
		rows := make([][]any, len(b.Audit))
		for i, a := range b.Audit {
			rows[i] = auditRow(conversationID, a, now)
		}
		seq, head, err = c.chainAudit(ctx, tx, rows)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("append to conversation %q: %w", conversationID, err)
	}
	c.Anchored(seq, head, now)
	return last, nil
}

// The writes of an append, table by table. PlanBatch and PlanMerged share these heads and tails.
const (
	entriesInsert = `INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at)`
	callsInsert   = `INSERT INTO tool_calls (conversation_id, tool_call_id, name, executor, approval, approvers, status, pending_kind, args, result, prompt, expires_at, seq, created_at, updated_at)`
	callsUpsert   = `ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET name = excluded.name, executor = excluded.executor, approval = excluded.approval,
		approvers = excluded.approvers, status = excluded.status, pending_kind = excluded.pending_kind, args = excluded.args, result = excluded.result,
		prompt = excluded.prompt, expires_at = excluded.expires_at, seq = CASE WHEN excluded.seq = 0 THEN tool_calls.seq ELSE excluded.seq END,
		updated_at = excluded.updated_at`
	expiriesInsert = `INSERT INTO expiries (conversation_id, tool_call_id, at)`
	expiriesUpsert = `ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET at = excluded.at, claimed_until = NULL`
	stepsInsert    = `INSERT INTO steps (conversation_id, key, attempts, next_attempt_at, last_error, updated_at)`
	stepsUpsert    = `ON CONFLICT (conversation_id, key) DO UPDATE SET attempts = excluded.attempts, next_attempt_at = excluded.next_attempt_at,
		last_error = excluded.last_error, updated_at = excluded.updated_at`
	notifyInsert = `INSERT INTO notify_outbox (id, payload, created_at, next_attempt_at)`
)

// Writes are the rows an append writes after its sequence check, table by table, each row in the
// column order of its table's insert above. Cancel and DoneSteps are (conversation, key) pairs
// to delete.
type Writes struct {
	Entries, Calls, Cancel, Schedule, DoneSteps, Steps, Audit, Grants, Notify [][]any
}

// PlanWrites returns the rows that write b after the entry numbered afterSeq, stamped now.
func PlanWrites(conv string, afterSeq int64, now time.Time, b store.Batch) Writes {
	var r Writes
	callSeq := map[string]int64{}
	r.Entries = make([][]any, len(b.Entries))
	for i, e := range b.Entries {
		seq := afterSeq + int64(i) + 1
		if e.Type == store.EntryToolCall && e.ToolCallID != "" {
			callSeq[e.ToolCallID] = seq
		}
		r.Entries[i] = []any{conv, seq, string(e.Type), e.ToolCallID, e.Actor, jsonArg(e.Data), now}
	}
	for _, tc := range lastByKey(b.Calls, func(tc store.ToolCall) string { return tc.ToolCallID }) {
		seq := tc.Seq
		if seq == 0 {
			seq = callSeq[tc.ToolCallID]
		}
		created := now
		if !tc.CreatedAt.IsZero() {
			created = ts(tc.CreatedAt)
		}
		r.Calls = append(r.Calls, []any{conv, tc.ToolCallID, tc.Name, tc.Executor, tc.Approval, tc.Approvers, tc.Status, tc.PendingKind,
			jsonArg(tc.Args), jsonArg(tc.Result), jsonArg(tc.Prompt), tsPtr(tc.ExpiresAt), seq, created, now})
	}
	for _, id := range b.Cancel {
		r.Cancel = append(r.Cancel, []any{conv, id})
	}
	for _, e := range lastByKey(b.Schedule, func(e store.Expiry) string { return e.ToolCallID }) {
		r.Schedule = append(r.Schedule, []any{conv, e.ToolCallID, ts(e.At)})
	}
	for _, k := range b.DoneSteps {
		r.DoneSteps = append(r.DoneSteps, []any{conv, k})
	}
	for _, s := range lastByKey(b.Steps, func(s store.Step) string { return s.Key }) {
		r.Steps = append(r.Steps, []any{conv, s.Key, int64(s.Attempts), tsPtr(s.NextAttemptAt), s.LastError, now})
	}
	for _, a := range b.Audit {
		r.Audit = append(r.Audit, auditRow(conv, a, now))
	}
	for _, g := range b.Grants {
		r.Grants = append(r.Grants, grantRow(g, conv, now))
	}
	for _, m := range b.Notify {
		r.Notify = append(r.Notify, notifyRow(m, now))
	}
	return r
}

// PlanBatch returns the statements that write b after the log's sequence check (see Append for
// the rules), stamped now, in the order they must run; its audit records are left out, for the
// caller to link and insert last (ChainAuditRows).
func PlanBatch(conv string, afterSeq int64, now time.Time, b store.Batch) []Stmt {
	r := PlanWrites(conv, afterSeq, now, b)
	var out []Stmt
	out = insertMany(out, entriesInsert, "", r.Entries)
	out = insertMany(out, callsInsert, callsUpsert, r.Calls)
	if len(b.Cancel) > 0 {
		out = append(out, Stmt{`DELETE FROM expiries WHERE conversation_id = $1 AND tool_call_id IN (` + placeholders(len(b.Cancel), 2) + `)`,
			append([]any{conv}, anySlice(b.Cancel)...)})
	}
	out = insertMany(out, expiriesInsert, expiriesUpsert, r.Schedule)
	if len(b.DoneSteps) > 0 {
		out = append(out, Stmt{`DELETE FROM steps WHERE conversation_id = $1 AND key IN (` + placeholders(len(b.DoneSteps), 2) + `)`,
			append([]any{conv}, anySlice(b.DoneSteps)...)})
	}
	out = insertMany(out, stepsInsert, stepsUpsert, r.Steps)
	out = insertMany(out, grantsInsert, "", r.Grants)
	return insertMany(out, notifyInsert, "", r.Notify)
}

// PlanMergedRest returns the statements that write what parley_append (migration 015) does not —
// steps, grants and notifications — for the writes of several appends (MergeWrites), their
// sequence checks already made: one statement per table whatever the number of rows, each
// column travelling as one array that unnest turns back into rows, so the statements' text never
// changes and stays prepared. The audit records are left out: the caller links and inserts them
// (ChainAuditRows).
// PostgreSQL only.
func PlanMergedRest(m Writes) []Stmt {
	var out []Stmt
	add := func(sql string, types []string, rows [][]any) {
		if len(rows) > 0 {
			out = append(out, Stmt{strings.Replace(sql, "UNNEST", unnest(types), 1), columns(rows, len(types))})
		}
	}
	add(`DELETE FROM steps WHERE (conversation_id, key) IN (SELECT * FROM UNNEST)`, []string{"text", "text"}, m.DoneSteps)
	add(stepsInsert+` SELECT * FROM UNNEST `+stepsUpsert, []string{"text", "text", "bigint", "timestamptz", "text", "timestamptz"}, m.Steps)
	add(grantsInsert+` SELECT * FROM UNNEST`, grantTypes, m.Grants)
	add(notifyInsert+` SELECT * FROM UNNEST`, []string{"text", "text", "timestamptz", "timestamptz"}, m.Notify)
	return out
}

// MergeWrites is the rows of several appends' writes together, table by table, in their order.
func MergeWrites(rs []Writes) Writes {
	var m Writes
	for _, r := range rs {
		m.Entries = append(m.Entries, r.Entries...)
		m.Calls = append(m.Calls, r.Calls...)
		m.Cancel = append(m.Cancel, r.Cancel...)
		m.Schedule = append(m.Schedule, r.Schedule...)
		m.DoneSteps = append(m.DoneSteps, r.DoneSteps...)
		m.Steps = append(m.Steps, r.Steps...)
		m.Audit = append(m.Audit, r.Audit...)
		m.Grants = append(m.Grants, r.Grants...)
		m.Notify = append(m.Notify, r.Notify...)
	}
	return m
}

// The columns' types of the entries, tool_calls and expiries inserts, in their order.
var (
	entryTypes  = []string{"text", "bigint", "text", "text", "text", "json", "timestamptz"}
	callTypes   = []string{"text", "text", "text", "text", "text", "text", "text", "text", "json", "json", "json", "timestamptz", "bigint", "timestamptz", "timestamptz"}
	expiryTypes = []string{"text", "text", "timestamptz"}
)

// AppendWritesArgs are the arrays parley_append (migration 015) takes after the appends' own:
// the columns of m's entries, tool calls, expiries to cancel and expiries to schedule, of the
// types AppendWritesTypes names.
func AppendWritesArgs(m Writes) []any {
	var out []any
	out = append(out, columns(m.Entries, len(entryTypes))...)
	out = append(out, columns(m.Calls, len(callTypes))...)
	out = append(out, columns(m.Cancel, 2)...)
	return append(out, columns(m.Schedule, len(expiryTypes))...)
}

// AppendWritesTypes are the array types of AppendWritesArgs, in order.
func AppendWritesTypes() []string {
	var out []string
	for _, ts := range [][]string{entryTypes, callTypes, {"text", "text"}, expiryTypes} {
		for _, t := range ts {
			out = append(out, t+"[]")
		}
	}
	return out
}

// Columns transposes rows of width columns into one []any per column: the arrays of a statement
// that takes a column per parameter.
func Columns(rows [][]any, width int) []any { return columns(rows, width) }

// unnest is "unnest($1::t1[], $2::t2[], …)".
func unnest(types []string) string {
	var b strings.Builder
	b.WriteString("unnest(")
	for i, t := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d::%s[]", i+1, t)
	}
	b.WriteString(")")
	return b.String()
}

// columns transposes rows into one []any per column.
func columns(rows [][]any, width int) []any {
	cols := make([]any, width)
	for c := range width {
		col := make([]any, len(rows))
		for i, r := range rows {
			col[i] = r[c]
		}
		cols[c] = col
	}
	return cols
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Log implements store.Store. A conversation that does not exist is store.ErrNotFound.
func (c *Core) Log(ctx context.Context, conversationID string, afterSeq int64) ([]store.Entry, error) {
	return c.logPage(ctx, conversationID, afterSeq, 0, 0)
}

// LogPage implements store.Store: the primary key (conversation_id, seq) gives the page in order
// without reading past it, and the rows are scanned one by one, so those past maxBytes are never
// kept.
func (c *Core) LogPage(ctx context.Context, conversationID string, afterSeq int64, limit, maxBytes int) ([]store.Entry, error) {
	if limit <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("log page of conversation %q: limit %d and maxBytes %d must be positive", conversationID, limit, maxBytes)
	}
	return c.logPage(ctx, conversationID, afterSeq, limit, maxBytes)
}

// logPage reads the entries after afterSeq, at most limit (0: all) and up to the one whose data
// reaches maxBytes (0: no bound).
func (c *Core) logPage(ctx context.Context, conversationID string, afterSeq int64, limit, maxBytes int) ([]store.Entry, error) {
	es, err := func() ([]store.Entry, error) {
		rows, err := c.DB.Query(ctx, `SELECT seq, type, tool_call_id, actor, data, created_at FROM entries WHERE conversation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
			conversationID, afterSeq, int64(limitOrAll(limit)))
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []store.Entry
		size := 0
		for rows.Next() {
			var e store.Entry
			var typ string
			if err := rows.Scan(&e.Seq, &typ, &e.ToolCallID, &e.Actor, &e.Data, &e.CreatedAt); err != nil {
				return nil, err
			}
			e.Type = store.EntryType(typ)
			out = append(out, e)
			if size += len(e.Data); maxBytes > 0 && size >= maxBytes {
				return out, nil
			}
		}
		return out, rows.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("log of conversation %q: %w", conversationID, err)
	}
	if len(es) == 0 {
		if _, err := c.GetConversation(ctx, conversationID); err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
	}
	return es, nil
}

const callCols = `tc.conversation_id, tc.tool_call_id, tc.name, tc.executor, tc.approval, tc.approvers, tc.status, tc.pending_kind,
	tc.args, tc.result, tc.prompt, tc.expires_at, tc.seq, tc.created_at, tc.updated_at`

func callDest(tc *store.ToolCall) []any {
	return []any{&tc.ConversationID, &tc.ToolCallID, &tc.Name, &tc.Executor, &tc.Approval, &tc.Approvers, &tc.Status, &tc.PendingKind,
		&tc.Args, &tc.Result, &tc.Prompt, &tc.ExpiresAt, &tc.Seq, &tc.CreatedAt, &tc.UpdatedAt}
}

func scanCall(r Rows) (store.ToolCall, error) {
	var tc store.ToolCall
	err := r.Scan(callDest(&tc)...)
	return tc, err
}

// ToolCalls implements store.Store.
func (c *Core) ToolCalls(ctx context.Context, conversationID string) ([]store.ToolCall, error) {
	cs, err := queryAll(ctx, c.DB, `SELECT `+callCols+` FROM tool_calls tc WHERE tc.conversation_id = $1 ORDER BY tc.seq, tc.created_at, tc.tool_call_id`,
		[]any{conversationID}, scanCall)
	if err != nil {
		return nil, fmt.Errorf("tool calls of conversation %q: %w", conversationID, err)
	}
	return cs, nil
}

// GetToolCall implements store.Store.
func (c *Core) GetToolCall(ctx context.Context, conversationID, toolCallID string) (store.ToolCall, error) {
	cs, err := queryAll(ctx, c.DB, `SELECT `+callCols+` FROM tool_calls tc WHERE tc.conversation_id = $1 AND tc.tool_call_id = $2`,
		[]any{conversationID, toolCallID}, scanCall)
	if err != nil {
		return store.ToolCall{}, fmt.Errorf("tool call %q: %w", toolCallID, err)
	}
	if len(cs) == 0 {
		return store.ToolCall{}, fmt.Errorf("tool call %q of conversation %q: %w", toolCallID, conversationID, store.ErrNotFound)
	}
	return cs[0], nil
}

// ListPending implements store.Store: awaiting calls, newest first (by creation, then log order).
func (c *Core) ListPending(ctx context.Context, f store.PendingFilter) ([]store.PendingCall, error) {
	// The status is a literal: PostgreSQL's index of pending calls holds awaiting ones only
	// (migration 013), which a planner sees only in the query's text.
	var args []any
	q := `SELECT ` + callCols + `, c.owner_id, c.title FROM tool_calls tc JOIN conversations c ON c.id = tc.conversation_id WHERE tc.status = '` + string(store.CallAwaiting) + `'`
	add := func(cond, v string) {
		if v != "" {
			args = append(args, v)
			q += ` AND ` + cond + ` = $` + strconv.Itoa(len(args))
		}
	}
	add("tc.pending_kind", f.Kind)
	add("tc.approvers", f.Approvers)
	add("c.owner_id", f.OwnerID)
	args = append(args, int64(limitOrAll(f.Limit)))
	q += ` ORDER BY tc.created_at DESC, tc.seq DESC, tc.conversation_id, tc.tool_call_id LIMIT $` + strconv.Itoa(len(args))
	ps, err := queryAll(ctx, c.DB, q, args, func(r Rows) (store.PendingCall, error) {
		var p store.PendingCall
		err := r.Scan(append(callDest(&p.ToolCall), &p.OwnerID, &p.Title)...)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list pending calls: %w", err)
	}
	return ps, nil
}

// ---- timers, steps, outbox, audit ----

// ScheduleExpiry implements store.Store: it replaces the call's timer and drops any claim on it.
// The timer is inserted beside its conversation's row, read under Dialect.KeyShare: a
// conversation that does not exist (or is deleted first) gets none, and is store.ErrNotFound.
func (c *Core) ScheduleExpiry(ctx context.Context, e store.Expiry) error {
	n, err := c.DB.Exec(ctx, `INSERT INTO expiries (conversation_id, tool_call_id, at) SELECT id, $2, $3 FROM conversations WHERE id = $1 `+c.Dialect.KeyShare+`
		ON CONFLICT (conversation_id, tool_call_id) DO UPDATE SET at = excluded.at, claimed_until = NULL`,
		e.ConversationID, e.ToolCallID, ts(e.At))
	if err != nil {
		return fmt.Errorf("schedule expiry of call %q: %w", e.ToolCallID, err)
	}
	if n == 0 {
		return fmt.Errorf("schedule expiry of call %q: conversation %q: %w", e.ToolCallID, e.ConversationID, store.ErrNotFound)
	}
	return nil
}

// CancelExpiry implements store.Store; cancelling a missing timer is not an error.
func (c *Core) CancelExpiry(ctx context.Context, conversationID, toolCallID string) error {
	if _, err := c.DB.Exec(ctx, `DELETE FROM expiries WHERE conversation_id = $1 AND tool_call_id = $2`, conversationID, toolCallID); err != nil {
		return fmt.Errorf("cancel expiry of call %q: %w", toolCallID, err)
	}
	return nil
}

// ClaimDueExpiries implements store.Store, earliest first.
func (c *Core) ClaimDueExpiries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.Expiry, error) {
	if lease <= 0 {
		return nil, errors.New("claim expiries: lease must be positive")
	}
	now = ts(now)
	var out []store.Expiry
	err := c.inTx(ctx, func(tx Tx) error {
		var err error
		out, err = queryAll(ctx, tx, `UPDATE expiries SET claimed_until = $1
			FROM (SELECT conversation_id AS cid, tool_call_id AS tid FROM expiries
			      WHERE at <= $2 AND (claimed_until IS NULL OR claimed_until <= $2)
			      ORDER BY at, conversation_id, tool_call_id LIMIT $3 `+c.Dialect.SkipLocked+`) AS due
			WHERE conversation_id = due.cid AND tool_call_id = due.tid
			RETURNING conversation_id, tool_call_id, at`,
			[]any{ts(now.Add(lease)), now, int64(limitOrAll(limit))}, func(r Rows) (store.Expiry, error) {
				var e store.Expiry
				err := r.Scan(&e.ConversationID, &e.ToolCallID, &e.At)
				return e, err
			})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim expiries: %w", err)
	}
	slices.SortFunc(out, func(a, b store.Expiry) int {
		if d := a.At.Compare(b.At); d != 0 {
			return d
		}
		return strings.Compare(a.ConversationID+"\x00"+a.ToolCallID, b.ConversationID+"\x00"+b.ToolCallID)
	})
	return out, nil
}

// Steps implements store.Store, ordered by key.
func (c *Core) Steps(ctx context.Context, conversationID string) ([]store.Step, error) {
	ss, err := queryAll(ctx, c.DB, `SELECT conversation_id, key, attempts, next_attempt_at, last_error, updated_at FROM steps WHERE conversation_id = $1 ORDER BY key`,
		[]any{conversationID}, func(r Rows) (store.Step, error) {
			var s store.Step
			err := r.Scan(&s.ConversationID, &s.Key, &s.Attempts, &s.NextAttemptAt, &s.LastError, &s.UpdatedAt)
			return s, err
		})
	if err != nil {
		return nil, fmt.Errorf("steps of conversation %q: %w", conversationID, err)
	}
	return ss, nil
}

const outboxCols = `id, conversation_id, tool_call_id, to_addr, subject, body, created_at`

func scanOutbox(r Rows) (store.OutboxMessage, error) {
	var m store.OutboxMessage
	err := r.Scan(&m.ID, &m.ConversationID, &m.ToolCallID, &m.To, &m.Subject, &m.Body, &m.CreatedAt)
	return m, err
}

// AddOutbox implements store.Store. ToolCallID is required.
func (c *Core) AddOutbox(ctx context.Context, m store.OutboxMessage) (store.OutboxMessage, error) {
	if m.ToolCallID == "" {
		return store.OutboxMessage{}, errors.New("add outbox message: tool call id is required")
	}
	var out store.OutboxMessage
	err := c.inTx(ctx, func(tx Tx) error {
		ms, err := queryAll(ctx, tx, `INSERT INTO outbox (conversation_id, tool_call_id, to_addr, subject, body, created_at) VALUES ($1,$2,$3,$4,$5,$6)
			ON CONFLICT (conversation_id, tool_call_id) DO NOTHING RETURNING `+outboxCols,
			[]any{m.ConversationID, m.ToolCallID, m.To, m.Subject, m.Body, c.now()}, scanOutbox)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return queryRow(ctx, tx, `SELECT `+outboxCols+` FROM outbox WHERE conversation_id = $1 AND tool_call_id = $2`, []any{m.ConversationID, m.ToolCallID},
				&out.ID, &out.ConversationID, &out.ToolCallID, &out.To, &out.Subject, &out.Body, &out.CreatedAt)
		}
		out = ms[0]
		return nil
	})
	if err != nil {
		return store.OutboxMessage{}, fmt.Errorf("add outbox message for call %q: %w", m.ToolCallID, err)
	}
	return out, nil
}

// ListOutbox implements store.Store, oldest first.
func (c *Core) ListOutbox(ctx context.Context, conversationID string) ([]store.OutboxMessage, error) {
	q, args := `SELECT `+outboxCols+` FROM outbox`, []any(nil)
	if conversationID != "" {
		q, args = q+` WHERE conversation_id = $1`, []any{conversationID}
	}
	ms, err := queryAll(ctx, c.DB, q+` ORDER BY id`, args, scanOutbox)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	return ms, nil
}

// Ping implements store.Store.
func (c *Core) Ping(ctx context.Context) error {
	if err := c.DB.Ping(ctx); err != nil {
		return fmt.Errorf("ping store: %w", err)
	}
	return nil
}

// ---- usage ----

// usageDay is the day's key: its UTC date.
func usageDay(day time.Time) string { return day.UTC().Format("2006-01-02") }

// AddUsage implements store.Store.
func (c *Core) AddUsage(ctx context.Context, userID string, day time.Time, tokens int64) error {
	if _, err := c.DB.Exec(ctx, `INSERT INTO usage (user_id, day, tokens) VALUES ($1,$2,$3)
		ON CONFLICT (user_id, day) DO UPDATE SET tokens = usage.tokens + excluded.tokens`, userID, usageDay(day), tokens); err != nil {
		return fmt.Errorf("add usage of %s: %w", userID, err)
	}
	return nil
}

// UsageOn implements store.Store.
func (c *Core) UsageOn(ctx context.Context, userID string, day time.Time) (int64, error) {
	var n int64
	err := queryRow(ctx, c.DB, `SELECT tokens FROM usage WHERE user_id = $1 AND day = $2`, []any{userID, usageDay(day)}, &n)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("usage of %s: %w", userID, err)
	}
	return n, nil
}
