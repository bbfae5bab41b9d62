package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/store"
	"parley/views"
)

// Invitations: an admin makes a one-time link (a random token whose SHA-256 alone is stored)
// that lets one person create an account with a role (member or reviewer), within its expiry,
// whether or not sign-up is open. The link is shown once (post-redirect-get through a short
// cookie, as for API tokens), listed without its secret, and revocable until used.

// newInviteCookie carries a just-created link from the POST to the page it redirects to.
const newInviteCookie = "parley_new_invite"

// InvitePath is the link of an invitation token.
func InvitePath(token string) string { return "/invite?token=" + url.QueryEscape(token) }

// adminInvitations: GET /admin/invitations → the invitations, and once the link just created.
func (s *Server) adminInvitations(c echo.Context) error {
	link, role := "", ""
	if ck, err := c.Cookie(newInviteCookie); err == nil && ck.Value != "" {
		// "<admin id>.<role>.<token>": shown only to the admin who created it.
		parts := strings.SplitN(ck.Value, ".", 3)
		if len(parts) == 3 && parts[0] == currentUser(c).ID {
			role, link = parts[1], c.Scheme()+"://"+c.Request().Host+InvitePath(parts[2])
		}
		c.SetCookie(&http.Cookie{Name: newInviteCookie, Value: "", Path: "/admin/invitations", MaxAge: -1,
			HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteStrictMode})
	}
	ctx := c.Request().Context()
	list, err := s.store.ListInvitations(ctx)
	if err != nil {
		return fmt.Errorf("list invitations: %w", err)
	}
	names := map[string]string{}
	name := func(id string) string {
		if id == "" {
			return ""
		}
		if n, ok := names[id]; ok {
			return n
		}
		n := id
		if u, err := s.store.UserByID(ctx, id); err == nil {
			n = u.Name
		}
		names[id] = n
		return n
	}
	now := s.now()
	rows := make([]views.InvitationRow, len(list))
	for i, inv := range list {
		r := views.InvitationRow{ID: inv.ID, Role: string(inv.Role), CreatedBy: name(inv.CreatedBy),
			CreatedAt: inv.CreatedAt, ExpiresAt: inv.ExpiresAt}
		switch {
		case inv.UsedAt != nil:
			r.State = "used by " + name(inv.UsedBy)
		case inv.RevokedAt != nil:
			r.State = "revoked"
		case !now.Before(inv.ExpiresAt):
			r.State = "expired"
		default:
			r.State, r.Open = "open", true
		}
		rows[i] = r
	}
	return s.render(c, http.StatusOK, views.AdminInvitationsPage(s.layoutData(c, "Invitations"), now, rows, link, role))
}

// createInvitation: POST /admin/invitations (role, expires_days) → a new link, shown once
// (auth.CreateInvitation says what each field may be).
func (s *Server) createInvitation(c echo.Context) error {
	ctx := c.Request().Context()
	token, inv, err := auth.CreateInvitation(ctx, s.store, s.now(), auth.InvitationSpec{CreatedBy: currentUser(c).ID,
		Role: c.FormValue("role"), ExpiresDays: c.FormValue("expires_days")})
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "invitation created", "by", currentUser(c).ID, "invitation_id", inv.ID, "role", string(inv.Role), "expires_at", inv.ExpiresAt)
	c.SetCookie(&http.Cookie{Name: newInviteCookie, Value: currentUser(c).ID + "." + string(inv.Role) + "." + token,
		Path: "/admin/invitations", MaxAge: 120, HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/admin/invitations")
}

// revokeInvitation: POST /admin/invitations/{id}/revoke → the link no longer works (404 when
// it is unknown or already used).
func (s *Server) revokeInvitation(c echo.Context) error {
	err := s.store.RevokeInvitation(c.Request().Context(), c.Param("invitation"))
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("revoke invitation: %w", err)
	}
	s.log.InfoContext(c.Request().Context(), "invitation revoked", "by", currentUser(c).ID, "invitation_id", c.Param("invitation"))
	return c.Redirect(http.StatusSeeOther, "/admin/invitations")
}

// usableInvitation finds the invitation of token and says, when it cannot be used, why (a page
// for the person holding the link: 404 when it is unknown, 410 when used, revoked or expired).
func (s *Server) usableInvitation(c echo.Context, token string) (store.Invitation, error) {
	if !strings.HasPrefix(token, auth.InvitationPrefix) || len(token) > 200 {
		return store.Invitation{}, s.inviteRefused(c, http.StatusNotFound, "This invitation link is not valid. Ask an administrator for a new one.")
	}
	inv, err := s.store.InvitationByHash(c.Request().Context(), auth.Hash(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Invitation{}, s.inviteRefused(c, http.StatusNotFound, "This invitation link is not valid. Ask an administrator for a new one.")
	case err != nil:
		return store.Invitation{}, fmt.Errorf("read invitation: %w", err)
	case inv.UsedAt != nil:
		return store.Invitation{}, s.inviteRefused(c, http.StatusGone, "This invitation has already been used. Sign in with the account it made, or ask an administrator for a new one.")
	case inv.RevokedAt != nil:
		return store.Invitation{}, s.inviteRefused(c, http.StatusGone, "This invitation was revoked. Ask an administrator for a new one.")
	case !s.now().Before(inv.ExpiresAt):
		return store.Invitation{}, s.inviteRefused(c, http.StatusGone, "This invitation has expired. Ask an administrator for a new one.")
	}
	return inv, nil
}

// errInviteRefused marks that usableInvitation already answered.
var errInviteRefused = errors.New("invitation refused")

func (s *Server) inviteRefused(c echo.Context, status int, message string) error {
	if err := s.render(c, status, views.ErrorPage(s.layoutData(c, "Invitation"), status, message)); err != nil {
		return err
	}
	return errInviteRefused
}

// inviteForm: GET /invite?token=… → the form that makes the invited account, or why the link
// no longer works.
func (s *Server) inviteForm(c echo.Context) error {
	token := c.QueryParam("token")
	inv, err := s.usableInvitation(c, token)
	if errors.Is(err, errInviteRefused) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, views.InvitePage(s.layoutData(c, "Join Parley"), views.AuthForm{CSRF: s.csrfToken(c)}, token, string(inv.Role)))
}

// invite: POST /invite → the invited account, made once with the invitation's role, signed in.
// The store claims the invitation and creates the account in one transaction, so two requests
// racing with one link make one account.
func (s *Server) invite(c echo.Context) error {
	ctx := c.Request().Context()
	token := c.FormValue("token")
	inv, err := s.usableInvitation(c, token)
	if errors.Is(err, errInviteRefused) {
		return nil
	}
	if err != nil {
		return err
	}
	name := strings.TrimSpace(c.FormValue("username"))
	f := views.AuthForm{Username: name, CSRF: s.csrfToken(c)}
	render := func(status int) error {
		return s.render(c, status, views.InvitePage(s.layoutData(c, "Join Parley"), f, token, string(inv.Role)))
	}
	hash, problem, err := s.newAccount(ctx, name, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		f.Error = problem
		return render(http.StatusUnprocessableEntity)
	}
	u, err := s.store.RedeemInvitation(ctx, auth.Hash(token), store.User{Name: name, PasswordHash: hash, CreatedAt: s.now()}, s.now())
	switch {
	case errors.Is(err, store.ErrConflict):
		// The holder of a valid invitation learns that a name is taken: they must pick
		// another, and the link stays usable. Only people an admin invited can ask this.
		f.Error = "That name is taken: choose another."
		return render(http.StatusConflict)
	case errors.Is(err, store.ErrNotFound):
		// Used, revoked or expired since the check above: say which.
		if _, err := s.usableInvitation(c, token); err != nil {
			if errors.Is(err, errInviteRefused) {
				return nil
			}
			return err
		}
		_ = s.inviteRefused(c, http.StatusGone, "This invitation can no longer be used.") // errInviteRefused: answered
		return nil
	case err != nil:
		return fmt.Errorf("redeem invitation: %w", err)
	}
	s.log.InfoContext(ctx, "invitation used", "invitation_id", inv.ID, "user_id", u.ID, "role", string(u.Role))
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/")
}
