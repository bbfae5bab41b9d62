package web

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/store"
	"parley/views"
)

// validName is what a user name may look like: short, and safe to show anywhere.
var validName = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// safeNext keeps a post-sign-in redirect on this site: a local absolute path, never "//host"
// or a scheme. Control characters are refused too: a browser drops tabs and newlines from a
// URL, so "/<tab>/host" would become "//host".
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.IndexFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "/"
	}
	return next
}

// loginForm shows the sign-in form.
func (s *Server) loginForm(c echo.Context) error {
	if currentUser(c) != nil {
		return c.Redirect(http.StatusSeeOther, safeNext(c.QueryParam("next")))
	}
	return s.renderLogin(c, http.StatusOK, views.AuthForm{Next: c.QueryParam("next")})
}

func (s *Server) renderLogin(c echo.Context, status int, f views.AuthForm) error {
	open, err := s.signupOpen(c)
	if err != nil {
		return err
	}
	f.SignupOpen = open
	f.CSRF = s.csrfToken(c)
	f.Next = safeNext(f.Next)
	return s.render(c, status, views.LoginPage(s.layoutData(c, "Sign in"), f))
}

// login checks a name and password. Failures count against the name and the client's address;
// past the limit the pair waits (429 with Retry-After) whether or not the password is right, so
// guessing gains nothing.
func (s *Server) login(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("username"))
	password := c.FormValue("password")
	f := views.AuthForm{Username: name, Next: c.FormValue("next")}
	key := strings.ToLower(name) + "|" + c.RealIP()
	if wait := s.throttle.Wait(key); wait > 0 {
		secs := retryAfterSeconds(wait)
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		f.Error = fmt.Sprintf("Too many failed sign-ins. Try again in %s.", humanWait(secs))
		return s.renderLogin(c, http.StatusTooManyRequests, f)
	}
	u, err := store.User{}, store.ErrNotFound
	if storableText(name) { // a name the store cannot hold names nobody
		u, err = s.store.UserByName(ctx, name)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("load user for sign-in: %w", err)
	}
	var hash []byte
	if err == nil {
		hash = u.PasswordHash
	}
	if !auth.CheckPassword(hash, password) {
		s.throttle.Fail(key)
		s.log.InfoContext(ctx, "sign-in failed", "user", name, "ip", c.RealIP())
		f.Error = "Wrong name or password."
		return s.renderLogin(c, http.StatusUnauthorized, f)
	}
	s.throttle.Succeed(key)
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, safeNext(f.Next))
}

// humanWait words a wait in seconds.
func humanWait(secs int) string {
	if secs < 90 {
		return fmt.Sprintf("%d seconds", secs)
	}
	return fmt.Sprintf("%d minutes", (secs+59)/60)
}

// startSession signs u in: a fresh random cookie token (only its SHA-256 is stored) and a fresh
// CSRF token, replacing any session the browser had.
func (s *Server) startSession(c echo.Context, u store.User) error {
	ctx := c.Request().Context()
	if old, ok := c.Get(keySession).(*store.Session); ok {
		if err := s.store.DeleteSession(ctx, old.TokenHash); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("end previous session: %w", err)
		}
	}
	token := auth.NewSecret("")
	now := s.now()
	sess := store.Session{
		TokenHash: auth.Hash(token), UserID: u.ID, CSRF: auth.NewSecret(""),
		ExpiresAt: now.Add(s.cfg.SessionTTL), CreatedAt: now,
	}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	s.setCookie(c, sessionCookie, token, int(s.cfg.SessionTTL.Seconds()))
	return nil
}

// logout ends the session.
func (s *Server) logout(c echo.Context) error {
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		if err := s.store.DeleteSession(c.Request().Context(), sess.TokenHash); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("end session: %w", err)
		}
	}
	s.clearCookie(c, sessionCookie)
	return c.Redirect(http.StatusSeeOther, "/login")
}

// signupForm shows the sign-up form, or says sign-up is closed.
func (s *Server) signupForm(c echo.Context) error {
	return s.renderSignup(c, http.StatusOK, views.AuthForm{})
}

func (s *Server) renderSignup(c echo.Context, status int, f views.AuthForm) error {
	open, err := s.signupOpen(c)
	if err != nil {
		return err
	}
	if !open && status == http.StatusOK {
		status = http.StatusForbidden
	}
	f.SignupOpen = open
	f.CSRF = s.csrfToken(c)
	return s.render(c, status, views.SignupPage(s.layoutData(c, "Sign up"), f))
}

// signup creates an account and signs it in. The first account is the admin; later ones are
// members, and only while sign-up is open.
func (s *Server) signup(c echo.Context) error {
	ctx := c.Request().Context()
	open, err := s.signupOpen(c)
	if err != nil {
		return err
	}
	if !open {
		return s.renderSignup(c, http.StatusForbidden, views.AuthForm{})
	}
	name := strings.TrimSpace(c.FormValue("username"))
	f := views.AuthForm{Username: name}
	if !validName.MatchString(name) {
		f.Error = "A name has 1 to 64 letters, digits, dots, dashes or underscores."
		return s.renderSignup(c, http.StatusUnprocessableEntity, f)
	}
	hash, err := auth.HashPassword(c.FormValue("password"), s.cfg.PasswordCost)
	if errors.Is(err, auth.ErrWeakPassword) {
		f.Error = "A password has 8 to 72 characters."
		return s.renderSignup(c, http.StatusUnprocessableEntity, f)
	}
	if err != nil {
		return err
	}
	s.signupMu.Lock()
	defer s.signupMu.Unlock()
	n, err := s.store.CountUsers(ctx)
	if err != nil {
		return fmt.Errorf("count users: %w", err)
	}
	role := store.RoleMember
	if n == 0 {
		role = store.RoleAdmin
	}
	u, err := s.store.CreateUser(ctx, store.User{Name: name, Role: role, PasswordHash: hash, CreatedAt: s.now()})
	if errors.Is(err, store.ErrConflict) {
		f.Error = "That name is taken."
		return s.renderSignup(c, http.StatusConflict, f)
	}
	if err != nil {
		return fmt.Errorf("create user: %w", err)
	}
	s.log.InfoContext(ctx, "user signed up", "user_id", u.ID, "role", string(u.Role))
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/")
}
