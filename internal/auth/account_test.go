package auth

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"ana", true},
		{"Ana.B-c_9", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"ana b", false},
		{"zoë", false},
		{"<ana>", false},
		{"ana\n", false},
	} {
		if err := CheckName(tc.name); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadName)) {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"member", "reviewer", "admin"} {
		if r, err := ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "root", "Admin", " admin"} {
		if _, err := ParseRole(s); fault.KindOf(err) != fault.KindInvalidArgs {
			t.Errorf("ParseRole(%q): %v, want invalid_args", s, err)
		}
	}
}

func TestNewUser(t *testing.T) {
	u, err := NewUser(t0, "ana", store.RoleReviewer, "long enough", bcrypt.MinCost)
	if err != nil || u.Name != "ana" || u.Role != store.RoleReviewer || !u.CreatedAt.Equal(t0) || !CheckPassword(u.PasswordHash, "long enough", bcrypt.MinCost) {
		t.Fatalf("NewUser = %+v, %v", u, err)
	}
	for _, tc := range []struct {
		name, password string
		role           store.Role
		want           func(error) bool
	}{
		{"a b", "long enough", store.RoleMember, func(err error) bool { return errors.Is(err, ErrBadName) }},
		{"ana", "long enough", "root", func(err error) bool { return fault.KindOf(err) == fault.KindInvalidArgs }},
		{"ana", "short", store.RoleMember, func(err error) bool { return errors.Is(err, ErrWeakPassword) }},
	} {
		if _, err := NewUser(t0, tc.name, tc.role, tc.password, bcrypt.MinCost); !tc.want(err) {
			t.Errorf("NewUser(%q, %q, %q): %v", tc.name, tc.role, tc.password, err)
		}
	}
}

func TestNewToken(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		spec    TokenSpec
		label   string
		scope   string
		expires time.Duration // 0: never
		field   string        // the refused field ("-" for the label, which names none); "" when accepted
	}{
		{spec: TokenSpec{Label: "ci"}, label: "ci", scope: store.ScopeFull},
		{spec: TokenSpec{Label: "  ci  ", Scope: store.ScopeResolve}, label: "ci", scope: store.ScopeResolve},
		{spec: TokenSpec{Label: "ci", ExpiresDays: " 30 "}, label: "ci", scope: store.ScopeFull, expires: 30 * day},
		{spec: TokenSpec{Label: "ci", ExpiresDays: "3650"}, label: "ci", scope: store.ScopeFull, expires: 3650 * day},
		{spec: TokenSpec{Label: strings.Repeat("é", 50)}, label: strings.Repeat("é", 50), scope: store.ScopeFull},
		{spec: TokenSpec{Label: ""}, field: "-"},
		{spec: TokenSpec{Label: "   "}, field: "-"},
		{spec: TokenSpec{Label: strings.Repeat("x", 101)}, field: "-"},
		{spec: TokenSpec{Label: "nul\x00"}, field: "-"},
		{spec: TokenSpec{Label: "bad\xff"}, field: "-"},
		{spec: TokenSpec{Label: "ci", Scope: "admin"}, field: "scope"},
		{spec: TokenSpec{Label: "ci", ExpiresDays: "0"}, field: "expires_days"},
		{spec: TokenSpec{Label: "ci", ExpiresDays: "3651"}, field: "expires_days"},
		{spec: TokenSpec{Label: "ci", ExpiresDays: "1.5"}, field: "expires_days"},
		// The label is checked first, then the scope, then the expiry.
		{spec: TokenSpec{Label: "", Scope: "admin", ExpiresDays: "0"}, field: "-"},
		{spec: TokenSpec{Label: "ci", Scope: "admin", ExpiresDays: "0"}, field: "scope"},
	} {
		tok, err := NewToken(t0, tc.spec)
		if tc.field != "" {
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Kind != fault.KindInvalidArgs {
				t.Errorf("%+v: %v, want invalid_args", tc.spec, err)
				continue
			}
			if got, _ := fe.Details["field"].(string); got != strings.TrimPrefix(tc.field, "-") {
				t.Errorf("%+v: field %q, want %q", tc.spec, got, tc.field)
			}
			continue
		}
		if err != nil || tok.Name != tc.label || tok.Scope != tc.scope || !tok.CreatedAt.Equal(t0) {
			t.Errorf("%+v: %+v, %v", tc.spec, tok, err)
			continue
		}
		switch {
		case tc.expires == 0 && tok.ExpiresAt != nil:
			t.Errorf("%+v: expires %v, want never", tc.spec, tok.ExpiresAt)
		case tc.expires != 0 && (tok.ExpiresAt == nil || !tok.ExpiresAt.Equal(t0.Add(tc.expires))):
			t.Errorf("%+v: expires %v, want %v", tc.spec, tok.ExpiresAt, t0.Add(tc.expires))
		}
	}
}

// FuzzNewToken: an accepted label is trimmed, storable and within MaxTokenLabel.
func FuzzNewToken(f *testing.F) {
	for _, s := range []string{"ci", " ci ", "", "nul\x00", "\xff", strings.Repeat("x", 101)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, label string) {
		tok, err := NewToken(t0, TokenSpec{Label: label})
		if err != nil {
			return
		}
		if tok.Name != strings.TrimSpace(tok.Name) || tok.Name == "" || len(tok.Name) > MaxTokenLabel ||
			!utf8.ValidString(tok.Name) || strings.IndexByte(tok.Name, 0) >= 0 {
			t.Fatalf("accepted label %q", tok.Name)
		}
	})
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestCreateToken: the token is stored with its hash alone, and is found by its secret.
func TestCreateToken(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	u, err := st.CreateUser(ctx, store.User{Name: "ana", Role: store.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := CreateToken(ctx, st, t0, TokenSpec{UserID: u.ID, Label: ""}); fault.KindOf(err) != fault.KindInvalidArgs {
		t.Fatalf("empty label: %v", err)
	}
	secret, tok, err := CreateToken(ctx, st, time.Now(), TokenSpec{UserID: u.ID, Label: " ci ", Scope: store.ScopeResolve, ExpiresDays: "7"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, TokenPrefix) || tok.Name != "ci" || tok.Scope != store.ScopeResolve || tok.ExpiresAt == nil {
		t.Fatalf("secret %q, token %+v", secret, tok)
	}
	found, err := st.APITokenByHash(ctx, Hash(secret))
	if err != nil || found.ID != tok.ID || found.UserID != u.ID {
		t.Fatalf("by hash: %+v, %v", found, err)
	}
	list, err := st.ListAPITokens(ctx, u.ID)
	if err != nil || len(list) != 1 || strings.Contains(string(list[0].Hash), secret) {
		t.Fatalf("list: %+v, %v", list, err)
	}
}

// TestCreateInvitation: the role defaults to member and is never admin; the expiry defaults to
// DefaultInvitationDays.
func TestCreateInvitation(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	root, err := st.CreateUser(ctx, store.User{Name: "root", Role: store.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := 24 * time.Hour
	for _, tc := range []struct {
		spec    InvitationSpec
		role    store.Role
		expires time.Duration
		field   string // the refused field; "" when accepted
	}{
		{spec: InvitationSpec{}, role: store.RoleMember, expires: DefaultInvitationDays * day},
		{spec: InvitationSpec{Role: "reviewer", ExpiresDays: "30"}, role: store.RoleReviewer, expires: 30 * day},
		{spec: InvitationSpec{Role: "admin"}, field: "role"},
		{spec: InvitationSpec{Role: "member", ExpiresDays: "31"}, field: "expires_days"},
		{spec: InvitationSpec{Role: "member", ExpiresDays: "0"}, field: "expires_days"},
	} {
		tc.spec.CreatedBy = root.ID
		token, inv, err := CreateInvitation(ctx, st, now, tc.spec)
		if tc.field != "" {
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Kind != fault.KindInvalidArgs || fe.Details["field"] != tc.field {
				t.Errorf("%+v: %v, want invalid_args on %s", tc.spec, err, tc.field)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(token, InvitationPrefix) || inv.Role != tc.role || !inv.ExpiresAt.Equal(now.Add(tc.expires)) {
			t.Errorf("%+v: %q %+v, %v", tc.spec, token, inv, err)
			continue
		}
		if found, err := st.InvitationByHash(ctx, Hash(token)); err != nil || found.ID != inv.ID {
			t.Errorf("%+v: by hash %+v, %v", tc.spec, found, err)
		}
	}
}
