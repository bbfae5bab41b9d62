package auth

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// The account rules: what a user's name and role, an API token's label, scope and expiry, and
// an invitation's role and expiry may be, and how users, tokens and invitations are made. The
// web forms and the `web user add` / `web token create` commands both ask these; neither
// restates them. Refusals of form fields are fault errors (invalid_args, naming the field
// where the form has one), which the web answers as they are.

// validName is what a user name may look like: short, and safe to show anywhere.
var validName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// ErrBadName refuses a user name outside the accepted shape.
var ErrBadName = errors.New("a name has 1 to 64 letters, digits, dots, dashes or underscores")

// CheckName returns ErrBadName unless name is an acceptable user name.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return ErrBadName
	}
	return nil
}

// ParseRole returns the role s names: member, reviewer or admin.
func ParseRole(s string) (store.Role, error) {
	switch r := store.Role(s); r {
	case store.RoleMember, store.RoleReviewer, store.RoleAdmin:
		return r, nil
	}
	return "", fault.Errorf(fault.KindInvalidArgs, "role must be member, reviewer or admin")
}

// NewUser checks a new account's name and role and hashes its password at cost (HashPassword):
// the user to store. Its errors are ErrBadName, ParseRole's and ErrWeakPassword.
func NewUser(now time.Time, name string, role store.Role, password string, cost int) (store.User, error) {
	if err := CheckName(name); err != nil {
		return store.User{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return store.User{}, err
	}
	hash, err := HashPassword(password, cost)
	if err != nil {
		return store.User{}, err
	}
	return store.User{Name: name, Role: role, PasswordHash: hash, CreatedAt: now}, nil
}

// TokenPrefix starts every API token, so a leaked one is recognisable in logs and scanners.
const TokenPrefix = "pt_"

// Bounds of an API token.
const (
	// MaxTokenLabel bounds a token's label, in bytes.
	MaxTokenLabel = 100
	// MaxTokenDays bounds a token's expiry (ten years; none at all is "never").
	MaxTokenDays = 3650
)

// TokenSpec is an API token asked for, as a form or a command gives it.
type TokenSpec struct {
	UserID string
	// Label names the token on the tokens page; surrounding spaces are dropped.
	Label string
	// Scope is full (when empty) or resolve.
	Scope string
	// ExpiresDays is a whole number of days from 1 to MaxTokenDays, or empty for never.
	ExpiresDays string
}

// NewToken checks spec — its label, then its scope, then its expiry — and returns the token to
// store, without its hash.
func NewToken(now time.Time, spec TokenSpec) (store.APIToken, error) {
	label := strings.TrimSpace(spec.Label)
	// tools.StorableText leaves exactly the text every store keeps as it is.
	if label == "" || len(label) > MaxTokenLabel || tools.StorableText(label) != label {
		return store.APIToken{}, fault.New(fault.KindInvalidArgs, fmt.Sprintf("a token needs a name of at most %d characters", MaxTokenLabel), nil)
	}
	scope := spec.Scope
	switch scope {
	case "":
		scope = store.ScopeFull
	case store.ScopeFull, store.ScopeResolve:
	default:
		return store.APIToken{}, fault.New(fault.KindInvalidArgs, "scope must be full or resolve", map[string]any{"field": "scope"})
	}
	var expires *time.Time
	if v := strings.TrimSpace(spec.ExpiresDays); v != "" {
		days, err := strconv.Atoi(v)
		if err != nil || days < 1 || days > MaxTokenDays {
			return store.APIToken{}, fault.New(fault.KindInvalidArgs, fmt.Sprintf("expires_days must be a whole number of days from 1 to %d, or empty for never", MaxTokenDays),
				map[string]any{"field": "expires_days"})
		}
		at := now.Add(time.Duration(days) * 24 * time.Hour)
		expires = &at
	}
	return store.APIToken{UserID: spec.UserID, Name: label, Scope: scope, ExpiresAt: expires, CreatedAt: now}, nil
}

// CreateToken checks spec (NewToken), stores the token and returns its secret, which exists
// nowhere else: the store keeps only its SHA-256. The tokens page and `web token create` both
// use it.
func CreateToken(ctx context.Context, st store.Store, now time.Time, spec TokenSpec) (string, store.APIToken, error) {
	t, err := NewToken(now, spec)
	if err != nil {
		return "", store.APIToken{}, err
	}
	secret := NewSecret(TokenPrefix)
	t.Hash = Hash(secret)
	if t, err = st.CreateAPIToken(ctx, t); err != nil {
		return "", store.APIToken{}, fmt.Errorf("create API token: %w", err)
	}
	return secret, t, nil
}

// Invitations: a one-time link (a random token whose SHA-256 alone is stored) that lets one
// person create an account with a role (member or reviewer), within its expiry.
const (
	// InvitationPrefix starts every invitation token, so a leaked one is recognisable.
	InvitationPrefix = "pi_"
	// DefaultInvitationDays and MaxInvitationDays bound an invitation's life.
	DefaultInvitationDays = 7
	MaxInvitationDays     = 30
)

// InvitationSpec is an invitation asked for, as the admin's form gives it.
type InvitationSpec struct {
	CreatedBy string
	// Role is member (when empty) or reviewer: an invitation never makes an admin.
	Role string
	// ExpiresDays is a whole number of days from 1 to MaxInvitationDays, or empty for
	// DefaultInvitationDays.
	ExpiresDays string
}

// CreateInvitation checks spec — its role, then its expiry — stores the invitation and returns
// its token, which exists nowhere else: the store keeps only its SHA-256.
func CreateInvitation(ctx context.Context, st store.Store, now time.Time, spec InvitationSpec) (string, store.Invitation, error) {
	role := store.Role(spec.Role)
	switch role {
	case "":
		role = store.RoleMember
	case store.RoleMember, store.RoleReviewer:
	default:
		return "", store.Invitation{}, fault.New(fault.KindInvalidArgs, "an invitation's role is member or reviewer", map[string]any{"field": "role"})
	}
	days := DefaultInvitationDays
	if v := strings.TrimSpace(spec.ExpiresDays); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxInvitationDays {
			return "", store.Invitation{}, fault.New(fault.KindInvalidArgs, fmt.Sprintf("expires_days must be a whole number of days from 1 to %d", MaxInvitationDays),
				map[string]any{"field": "expires_days"})
		}
		days = n
	}
	token := NewSecret(InvitationPrefix)
	// The store stamps CreatedAt (its stamps are strictly increasing: the list's order is total).
	inv, err := st.CreateInvitation(ctx, store.Invitation{Hash: Hash(token), Role: role, CreatedBy: spec.CreatedBy,
		ExpiresAt: now.Add(time.Duration(days) * 24 * time.Hour)})
	if err != nil {
		return "", store.Invitation{}, fmt.Errorf("create invitation: %w", err)
	}
	return token, inv, nil
}
