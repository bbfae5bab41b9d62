package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views"
)

const dateFormat = "2006-01-02 15:04 UTC"

// tokensPage lists the user's API tokens.
func (s *Server) tokensPage(c echo.Context) error {
	return s.renderTokens(c, http.StatusOK, "", "")
}

func (s *Server) renderTokens(c echo.Context, status int, created, createdName string) error {
	u := currentUser(c)
	list, err := s.store.ListAPITokens(c.Request().Context(), u.ID)
	if err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	rows := make([]views.TokenRow, 0, len(list))
	for _, t := range list {
		if t.RevokedAt != nil {
			continue
		}
		rows = append(rows, views.TokenRow{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt.UTC().Format(dateFormat)})
	}
	return s.render(c, status, views.TokensPage(s.layoutData(c, "API tokens"), rows, created, createdName))
}

// createToken makes a token and shows it once; only its hash is stored.
func (s *Server) createToken(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("name"))
	if name == "" || len(name) > 100 || !storableText(name) {
		return tools.NewError(tools.KindInvalidArgs, "a token needs a name of at most 100 characters", nil)
	}
	secret, err := s.newToken(c, currentUser(c).ID, name)
	if err != nil {
		return err
	}
	return s.renderTokens(c, http.StatusCreated, secret, name)
}

// newToken creates an API token for userID and returns the secret.
func (s *Server) newToken(c echo.Context, userID, name string) (string, error) {
	secret, t, err := auth.CreateToken(c.Request().Context(), s.store, s.now(), userID, name)
	if err != nil {
		return "", err
	}
	s.log.InfoContext(c.Request().Context(), "API token created", "user_id", userID, "token_id", t.ID)
	return secret, nil
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
	s.log.InfoContext(c.Request().Context(), "API token revoked", "user_id", u.ID, "token_id", c.Param("token"))
	return c.Redirect(http.StatusSeeOther, "/tokens")
}
