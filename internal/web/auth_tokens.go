package web

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/store"
	"parley/views"
)

// newTokenCookie carries a just-created token from the POST to the page it redirects to, once:
// the secret never goes in a URL, and a reload shows the list without making another token.
const newTokenCookie = "parley_new_token"

// tokensPage lists the user's API tokens, and once the token just created.
func (s *Server) tokensPage(c echo.Context) error {
	created, name := "", ""
	if ck, err := c.Cookie(newTokenCookie); err == nil && ck.Value != "" {
		// "<user id>.<name, base64>.<secret>": shown only to the user who created it.
		parts := strings.SplitN(ck.Value, ".", 3)
		if len(parts) == 3 && parts[0] == currentUser(c).ID {
			if b, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil {
				created, name = parts[2], string(b)
			}
		}
		s.clearNewToken(c)
	}
	return s.renderTokens(c, http.StatusOK, created, name)
}

func (s *Server) renderTokens(c echo.Context, status int, created, createdName string) error {
	u := currentUser(c)
	list, err := s.store.ListAPITokens(c.Request().Context(), u.ID)
	if err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	now := s.now()
	rows := make([]views.TokenRow, 0, len(list))
	for _, t := range list {
		if t.RevokedAt != nil {
			continue
		}
		rows = append(rows, views.TokenRow{ID: t.ID, Name: t.Name, Scope: t.Scope, CreatedAt: t.CreatedAt,
			Expires: t.ExpiresAt, Expired: tokenExpired(t, now), LastUsed: t.LastUsedAt})
	}
	return s.render(c, status, views.TokensPage(s.layoutData(c, "API tokens"), now, rows, created, createdName))
}

// createToken makes a token and shows it once; only its hash is stored. The form gives a name,
// a scope (full, the default, or resolve) and optionally an expiry in days (auth.NewToken says
// what each may be).
func (s *Server) createToken(c echo.Context) error {
	ctx := c.Request().Context()
	secret, t, err := auth.CreateToken(ctx, s.store, s.now(), auth.TokenSpec{UserID: currentUser(c).ID,
		Label: c.FormValue("name"), Scope: c.FormValue("scope"), ExpiresDays: c.FormValue("expires_days")})
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "API token created", "user_id", t.UserID, "token_id", t.ID, "scope", t.Scope, "expires_at", t.ExpiresAt)
	// Post-redirect-get: the page shows the token once; reloading it makes nothing.
	c.SetCookie(&http.Cookie{Name: newTokenCookie, Value: currentUser(c).ID + "." + base64.RawURLEncoding.EncodeToString([]byte(t.Name)) + "." + secret,
		Path: "/tokens", MaxAge: 120, HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/tokens")
}

// revokeToken revokes one of the user's tokens; someone else's token is not found.
func (s *Server) revokeToken(c echo.Context) error {
	u := currentUser(c)
	err := s.store.RevokeAPIToken(c.Request().Context(), u.ID, c.Param("token"))
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	s.tokens.forgetUser(u.ID) // revoked here: no longer trusted from the cache either
	s.live.ringAll()          // its live streams and sockets end now
	s.log.InfoContext(c.Request().Context(), "API token revoked", "user_id", u.ID, "token_id", c.Param("token"))
	return c.Redirect(http.StatusSeeOther, "/tokens")
}

// clearNewToken drops the just-created token's cookie (shown, or its user signed out).
func (s *Server) clearNewToken(c echo.Context) {
	c.SetCookie(&http.Cookie{Name: newTokenCookie, Value: "", Path: "/tokens", MaxAge: -1,
		HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteStrictMode})
}
