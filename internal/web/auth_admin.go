package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/views"
)

// adminUsers lists accounts with their roles and states, and the sign-up switch.
func (s *Server) adminUsers(c echo.Context) error {
	return s.renderUsers(c, http.StatusOK, views.AdminUsersForm{Notice: usersNotice(c.QueryParam("notice"))})
}

// renderUsers renders the users page with f (a notice, or an error and the create form's
// values).
func (s *Server) renderUsers(c echo.Context, status int, f views.AdminUsersForm) error {
	ctx := c.Request().Context()
	users, err := s.store.ListUsers(ctx)
	if err != nil {
		return fmt.Errorf("list users: %w", err)
	}
	me := currentUser(c)
	rows := make([]views.UserRow, len(users))
	for i, u := range users {
		rows[i] = views.UserRow{ID: u.ID, Name: u.Name, Role: string(u.Role), CreatedAt: u.CreatedAt,
			Self: u.ID == me.ID, Disabled: u.Disabled}
	}
	open, err := s.signupOpen(c)
	if err != nil {
		return err
	}
	return s.render(c, status, views.AdminUsersPage(s.layoutData(c, "Users"), s.now(), rows, open, f))
}

// usersNotice is what the users page says after the action named by ?notice=.
func usersNotice(key string) string {
	return map[string]string{
		"created":  "The account was created. Give its name and password to its owner.",
		"disabled": "The account is disabled: its sessions ended, and its sign-in and tokens are refused.",
		"enabled":  "The account is enabled again.",
		"password": "The password was set, and the account's sessions ended.",
	}[key]
}

// createUser: POST /admin/users → a new account with a name, a role and an initial password
// that the admin hands over (or an invitation, on the invitations page, lets them choose one).
func (s *Server) createUser(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("name"))
	f := views.AdminUsersForm{Name: name, Role: c.FormValue("role")}
	role, err := auth.ParseRole(f.Role)
	if err != nil {
		f.Error = "Choose a role: member, reviewer or admin."
		return s.renderUsers(c, http.StatusUnprocessableEntity, f)
	}
	hash, problem, err := s.newAccount(ctx, name, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		f.Error = problem
		return s.renderUsers(c, http.StatusUnprocessableEntity, f)
	}
	u, err := s.store.CreateUser(ctx, store.User{Name: name, Role: role, PasswordHash: hash})
	if errors.Is(err, store.ErrConflict) {
		f.Error = fmt.Sprintf("The name %q is taken: choose another.", name)
		return s.renderUsers(c, http.StatusConflict, f)
	}
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	s.log.InfoContext(ctx, "account created", "by", currentUser(c).ID, "user_id", u.ID, "role", string(role))
	return c.Redirect(http.StatusSeeOther, "/admin/users?notice=created")
}

// setDisabled: POST /admin/users/:user/disabled → disables (disabled=true) or enables an
// account. Disabling ends the account's sessions and live connections, and its tokens are
// refused until it is enabled again. An admin cannot disable themselves, and the store refuses
// to disable the last enabled admin.
func (s *Server) setDisabled(c echo.Context) error {
	ctx := c.Request().Context()
	var disabled bool
	switch c.FormValue("disabled") {
	case "true":
		disabled = true
	case "false":
	default:
		return fault.Errorf(fault.KindInvalidArgs, "disabled must be true or false")
	}
	id := c.Param("user")
	if id == currentUser(c).ID {
		return s.renderUsers(c, http.StatusForbidden, views.AdminUsersForm{Error: "You cannot disable your own account."})
	}
	err := s.store.SetUserDisabled(ctx, id, disabled)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNotFound
	case errors.Is(err, store.ErrConflict):
		return s.renderUsers(c, http.StatusConflict, views.AdminUsersForm{Error: "That is the last enabled admin: enable or promote another admin first."})
	case err != nil:
		return fmt.Errorf("set disabled: %w", err)
	}
	notice := "enabled"
	if disabled {
		notice = "disabled"
		if _, err := s.store.EndUserSessions(ctx, id, nil); err != nil {
			return fmt.Errorf("end the disabled account's sessions: %w", err)
		}
	}
	s.tokens.forgetUser(id) // the next API request reads the account again
	s.live.ringAll()        // and its live connections re-check now
	s.log.InfoContext(ctx, "account "+notice, "by", currentUser(c).ID, "user_id", id)
	return c.Redirect(http.StatusSeeOther, "/admin/users?notice="+notice)
}

// resetPassword: POST /admin/users/:user/password → sets another account's password (for
// someone who lost theirs) and ends that account's sessions. An admin changes their own on
// the account page, which asks for the current one.
func (s *Server) resetPassword(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("user")
	if id == currentUser(c).ID {
		return s.renderUsers(c, http.StatusForbidden, views.AdminUsersForm{Error: "Change your own password on your account page."})
	}
	if _, err := s.store.UserByID(ctx, id); errors.Is(err, store.ErrNotFound) {
		return errNotFound
	} else if err != nil {
		return fmt.Errorf("load user: %w", err)
	}
	hash, problem, err := s.newPassword(ctx, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		return s.renderUsers(c, http.StatusUnprocessableEntity, views.AdminUsersForm{Error: problem})
	}
	if err := s.store.SetPassword(ctx, id, hash); err != nil {
		return fmt.Errorf("reset password: %w", err)
	}
	n, err := s.store.EndUserSessions(ctx, id, nil)
	if err != nil {
		return fmt.Errorf("end the sessions after a reset: %w", err)
	}
	s.live.ringAll()
	s.log.InfoContext(ctx, "password reset", "by", currentUser(c).ID, "user_id", id, "sessions_ended", n)
	return c.Redirect(http.StatusSeeOther, "/admin/users?notice=password")
}

// setRole changes another user's role. An admin cannot change their own, so the app always
// keeps at least the admin who is acting.
func (s *Server) setRole(c echo.Context) error {
	role, err := auth.ParseRole(c.FormValue("role"))
	if err != nil {
		return err
	}
	id := c.Param("user")
	if id == currentUser(c).ID {
		return fault.New(fault.KindPermissionDenied, "you cannot change your own role", nil)
	}
	err = s.store.SetUserRole(c.Request().Context(), id, role)
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return fmt.Errorf("set role: %w", err)
	}
	s.tokens.forgetUser(id) // the new role applies to the user's next API request
	s.live.ringAll()        // and to their live connections at once
	s.log.InfoContext(c.Request().Context(), "role changed", "by", currentUser(c).ID, "user_id", id, "role", string(role))
	return c.Redirect(http.StatusSeeOther, "/admin/users")
}

// setSignup opens or closes sign-up.
func (s *Server) setSignup(c echo.Context) error {
	v := signupOpenValue
	switch c.FormValue("open") {
	case "true":
	case "false":
		v = signupClosed
	default:
		return fault.Errorf(fault.KindInvalidArgs, "open must be true or false")
	}
	if err := s.store.SetSetting(c.Request().Context(), signupKey, v); err != nil {
		return fmt.Errorf("set sign-up: %w", err)
	}
	s.log.InfoContext(c.Request().Context(), "sign-up switched", "by", currentUser(c).ID, "state", v)
	return c.Redirect(http.StatusSeeOther, "/admin/users")
}
