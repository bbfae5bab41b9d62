package web

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/views"
)

// adminUsers lists accounts with their roles and the sign-up switch.
func (s *Server) adminUsers(c echo.Context) error {
	ctx := c.Request().Context()
	users, err := s.store.ListUsers(ctx)
	if err != nil {
		return fmt.Errorf("list users: %w", err)
	}
	me := currentUser(c)
	rows := make([]views.UserRow, len(users))
	for i, u := range users {
		rows[i] = views.UserRow{ID: u.ID, Name: u.Name, Role: string(u.Role), CreatedAt: u.CreatedAt.UTC().Format(dateFormat), Self: u.ID == me.ID}
	}
	open, err := s.signupOpen(c)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, views.AdminUsersPage(s.layoutData(c, "Users"), rows, open))
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
