package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/views"
)

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
	f := views.AuthForm{Next: c.QueryParam("next")}
	if c.QueryParam("notice") == "signup" {
		f.Notice = signupNotice
	}
	return s.renderLogin(c, http.StatusOK, f)
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

// login checks a name and password. Failures count against the account (a wait that doubles
// with each one past the free ones, capped), the client's address and its subnet (a lock past
// their limits, whatever names were tried); while any of them waits the answer is 429 with
// Retry-After whether or not the password is right, so guessing gains nothing. Password checks
// wait for a hashing slot.
func (s *Server) login(c echo.Context) error {
	ctx := c.Request().Context()
	name := strings.TrimSpace(c.FormValue("username"))
	password := c.FormValue("password")
	f := views.AuthForm{Username: name, Next: c.FormValue("next")}
	try, wait, err := s.startPasswordTry(c, name)
	if err != nil {
		return err
	}
	if wait > 0 {
		secs := retryAfterSeconds(wait)
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
		f.Error = fmt.Sprintf("Too many failed sign-ins. Try again in %s.", humanWait(secs))
		return s.renderLogin(c, http.StatusTooManyRequests, f)
	}
	u, err := store.User{}, store.ErrNotFound
	if agent.Storable(name) { // a name the store cannot hold names nobody
		u, err = s.store.UserByName(ctx, name)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("load user for sign-in: %w", err)
	}
	var hash []byte
	if err == nil {
		hash = u.PasswordHash
	}
	ok, err := try.check(ctx, hash, password)
	switch {
	case err != nil:
		return err
	case !ok:
		s.log.InfoContext(ctx, "sign-in failed", "user", name, "ip", c.RealIP())
		f.Error = "Wrong name or password."
		return s.renderLogin(c, http.StatusUnauthorized, f)
	}
	if u.Disabled { // said only to whoever knows the password
		s.log.InfoContext(ctx, "sign-in refused: account disabled", "user_id", u.ID, "ip", c.RealIP())
		f.Error = "This account is disabled. Ask an administrator to enable it."
		return s.renderLogin(c, http.StatusForbidden, f)
	}
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, safeNext(f.Next))
}

// signInKeys are the throttle keys of a sign-in (or a password check) by name from this client.
func (s *Server) signInKeys(c echo.Context, name string) (account, addr, subnet string) {
	ip := c.RealIP()
	return "acct|" + strings.ToLower(name), "ip|" + ip, "net|" + subnetOf(ip)
}

// The sign-in limits live in the store (store.UpdateSignInAttempts), so every process on one
// database counts against one budget and a restart forgets nothing. A key is stored as its
// SHA-256: the table holds no name and no address, and any text a client sends (a name the
// store could not hold, a forged address) makes a key.
func signInKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return hex.EncodeToString(sum[:])
}

// errSignInLimits answers a sign-in whose limits could not be read or written: it is refused
// (503, try again) rather than let through uncounted, and never a 500.
var errSignInLimits = fault.New(fault.KindServiceUnavailable, "sign-in is unavailable for a moment: try again shortly",
	map[string]any{"retry_after_seconds": 2})

// reserveSignIn counts a password try against the account, the address and its subnet before
// the password is checked, so tries sent at once (to any process) cannot all pass the limits; it
// returns how long to wait instead when any of them is spent (and then counts nothing). The
// account's throttle is progressive, the address's and the subnet's hard (auth.Throttle).
func (s *Server) reserveSignIn(ctx context.Context, keys [3]string) (time.Duration, error) {
	rules := [3]*auth.Throttle{s.throttle, s.perIP, s.perNet}
	var wait time.Duration
	err := s.store.UpdateSignInAttempts(ctx, hashedKeys(keys), func(cur []store.SignInAttempts) []store.SignInAttempts {
		now := s.clock.Now()
		wait = 0
		for i, r := range rules {
			if w := r.WaitOf(auth.Attempts(cur[i]), now); w > 0 {
				wait = w
				return cur
			}
		}
		next := make([]store.SignInAttempts, len(cur))
		for i, r := range rules {
			next[i] = store.SignInAttempts(r.Counted(auth.Attempts(cur[i]), now))
		}
		return next
	})
	if err != nil {
		s.log.WarnContext(ctx, "sign-in limits", "err", err)
		return 0, errSignInLimits
	}
	return wait, nil
}

// SweepSignIns deletes the sign-in limits' keys whose window is over (they count nothing any
// more) and says how many; the app calls it with the sessions' purge.
func (s *Server) SweepSignIns(ctx context.Context) (int, error) {
	return s.store.SweepSignInAttempts(ctx, s.clock.Now().Add(-s.cfg.LoginWindow))
}

func hashedKeys(keys [3]string) []string {
	return []string{signInKey(keys[0]), signInKey(keys[1]), signInKey(keys[2])}
}

// passwordTry is one password check by name from this client, already counted against the
// sign-in limits (startPasswordTry).
type passwordTry struct {
	s    *Server
	keys [3]string // the account, the address, the subnet
}

// startPasswordTry reserves a password try by name from this client within the sign-in limits;
// wait > 0 says how long to wait instead (nothing was counted). An error (the limits could not
// be read) refuses the try.
func (s *Server) startPasswordTry(c echo.Context, name string) (passwordTry, time.Duration, error) {
	account, addr, subnet := s.signInKeys(c, name)
	try := passwordTry{s, [3]string{account, addr, subnet}}
	wait, err := s.reserveSignIn(c.Request().Context(), try.keys)
	return try, wait, err
}

// check compares password with hash in a hashing slot. A right password clears the account's
// failures and takes back the address's reserved try (earlier failures stay counted: one right
// guess among many is still spraying).
func (t passwordTry) check(ctx context.Context, hash []byte, password string) (bool, error) {
	if err := t.s.hashSlot(ctx); err != nil {
		return false, err
	}
	ok := auth.CheckPassword(hash, password, t.s.cfg.PasswordCost)
	<-t.s.hashing
	if ok {
		err := t.s.store.UpdateSignInAttempts(ctx, hashedKeys(t.keys), func(cur []store.SignInAttempts) []store.SignInAttempts {
			next := slices.Clone(cur)
			next[0] = store.SignInAttempts{}
			for i := 1; i < len(next); i++ {
				next[i].Failures = max(next[i].Failures-1, 0)
			}
			return next
		})
		if err != nil {
			// The password was right: the sign-in goes on; the try stays counted.
			t.s.log.WarnContext(ctx, "sign-in limits: take back a right password's try", "err", err)
		}
	}
	return ok, nil
}

// hashSlot waits for one of the hashing slots (bcrypt costs ~50 ms of a core); the caller
// gives it back with <-s.hashing.
func (s *Server) hashSlot(ctx context.Context) error {
	select {
	case s.hashing <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Problems with new credentials, as the forms say them.
const (
	badName     = "A name has 1 to 64 letters, digits, dots, dashes or underscores."
	badPassword = "A password has 8 to 72 characters."
)

// newPassword hashes a new password in a hashing slot; problem, when not empty, is what the
// person must fix.
func (s *Server) newPassword(ctx context.Context, password string) (hash []byte, problem string, err error) {
	if err := s.hashSlot(ctx); err != nil {
		return nil, "", err
	}
	hash, err = auth.HashPassword(password, s.cfg.PasswordCost)
	<-s.hashing
	if errors.Is(err, auth.ErrWeakPassword) {
		return nil, badPassword, nil
	}
	return hash, "", err
}

// newAccount checks a new account's name and hashes its password (newPassword); problem is
// what the form shows when either is refused. Sign-up, the setup link and invitations share it.
func (s *Server) newAccount(ctx context.Context, name, password string) (hash []byte, problem string, err error) {
	if auth.CheckName(name) != nil {
		return nil, badName, nil
	}
	return s.newPassword(ctx, password)
}

// subnetOf is the subnet an address counts in for sign-in limits: its /24 (IPv4) or /64 (IPv6).
func subnetOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	bits := 64
	if a.Is4() || a.Is4In6() {
		a, bits = a.Unmap(), 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return ip
	}
	return p.String()
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
		ExpiresAt: s.sessionExpiry(now, now), CreatedAt: now,
	}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	s.setCookie(c, s.sessionCookie(), token, int(s.cfg.SessionTTL.Seconds()))
	return nil
}

// sessionExpiry is when a session created at created, active at now, ends: after SessionIdle
// without a request, and at the latest SessionTTL after it began.
func (s *Server) sessionExpiry(created, now time.Time) time.Time {
	idle, absolute := now.Add(s.cfg.SessionIdle), created.Add(s.cfg.SessionTTL)
	if idle.After(absolute) {
		return absolute
	}
	return idle
}

// logout ends the session.
func (s *Server) logout(c echo.Context) error {
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		if err := s.store.DeleteSession(c.Request().Context(), sess.TokenHash); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("end session: %w", err)
		}
		s.live.ringAll() // the sockets and streams the session opened end now
	}
	s.clearCookie(c, s.sessionCookie())
	s.clearNewToken(c)
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

// signupNotice is what the sign-in page says after every sign-up, whether or not the name was
// free: the answer must not tell a stranger which names exist.
const signupNotice = "If that name was free, your account is ready: sign in with it. If it was taken, nothing was created: choose another name on the sign-up page."

// signup creates a member's account, while an admin keeps sign-up open. Its answer does not
// reveal whether the name was taken: a free name and a taken one both get 303 to the sign-in
// page with the same notice and no session (the new member signs in with their password),
// and both cost the same work — the password is hashed (bcrypt) and the insert tried before
// the answer, so timing tells as little as the body. Bad input (a malformed name, a weak
// password) is answered as such: it does not depend on who exists.
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
	hash, problem, err := s.newAccount(ctx, name, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		f.Error = problem
		return s.renderSignup(c, http.StatusUnprocessableEntity, f)
	}
	u, err := s.store.CreateUser(ctx, store.User{Name: name, Role: store.RoleMember, PasswordHash: hash, CreatedAt: s.now()})
	switch {
	case errors.Is(err, store.ErrConflict):
		s.log.InfoContext(ctx, "sign-up for a taken name", "ip", c.RealIP())
	case err != nil:
		return fmt.Errorf("create user: %w", err)
	default:
		s.log.InfoContext(ctx, "user signed up", "user_id", u.ID, "role", string(u.Role))
	}
	return c.Redirect(http.StatusSeeOther, "/login?notice=signup")
}

// SetupPath is the one-time setup link of an empty store for its token (the app prints it at
// start): it creates the first admin.
func SetupPath(token string) string { return "/setup?token=" + url.QueryEscape(token) }

// setupKey is the setting that holds the SHA-256 (hex) of the current setup token.
const setupKey = "setup_token"

// setupAllowed reports whether token is the store's current setup token and the store has no
// users yet.
func (s *Server) setupAllowed(c echo.Context, token string) (bool, error) {
	ctx := c.Request().Context()
	n, err := s.store.CountUsers(ctx)
	if err != nil {
		return false, fmt.Errorf("count users: %w", err)
	}
	if n > 0 || token == "" {
		return false, nil
	}
	want, err := s.store.GetSetting(ctx, setupKey)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the setup token: %w", err)
	}
	got := hex.EncodeToString(auth.Hash(token))
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1, nil
}

// setupForm: GET /setup?token=… → the form that creates the first admin, when the token is the
// one the server printed and there is no account yet; 404 otherwise (the link says nothing once
// used).
func (s *Server) setupForm(c echo.Context) error {
	token := c.QueryParam("token")
	ok, err := s.setupAllowed(c, token)
	if err != nil {
		return err
	}
	if !ok {
		return errNotFound
	}
	return s.render(c, http.StatusOK, views.SetupPage(s.layoutData(c, "Set up Parley"), views.AuthForm{CSRF: s.csrfToken(c)}, token))
}

// setup: POST /setup → the first admin, signed in. The store makes at most one bootstrap admin
// (CreateFirstAdmin), whatever the races between requests or processes.
func (s *Server) setup(c echo.Context) error {
	ctx := c.Request().Context()
	token := c.FormValue("token")
	ok, err := s.setupAllowed(c, token)
	if err != nil {
		return err
	}
	if !ok {
		return errNotFound
	}
	name := strings.TrimSpace(c.FormValue("username"))
	f := views.AuthForm{Username: name, CSRF: s.csrfToken(c)}
	render := func(status int) error {
		return s.render(c, status, views.SetupPage(s.layoutData(c, "Set up Parley"), f, token))
	}
	hash, problem, err := s.newAccount(ctx, name, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		f.Error = problem
		return render(http.StatusUnprocessableEntity)
	}
	u, err := s.store.CreateFirstAdmin(ctx, store.User{Name: name, PasswordHash: hash, CreatedAt: s.now()})
	if errors.Is(err, store.ErrConflict) {
		return errNotFound // someone else set it up first
	}
	if err != nil {
		return fmt.Errorf("create the first admin: %w", err)
	}
	if err := s.store.SetSetting(ctx, setupKey, ""); err != nil {
		s.log.WarnContext(ctx, "clear the setup token", "err", err)
	}
	s.log.InfoContext(ctx, "first admin set up", "user_id", u.ID)
	if err := s.startSession(c, u); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/")
}

// accountPage: GET /account → the password form and "sign out everywhere".
func (s *Server) accountPage(c echo.Context) error {
	return s.renderAccount(c, http.StatusOK, views.AccountForm{Notice: noticeFor(c.QueryParam("notice"))})
}

func (s *Server) renderAccount(c echo.Context, status int, f views.AccountForm) error {
	f.CSRF = s.csrfToken(c)
	return s.render(c, status, views.AccountPage(s.layoutData(c, "Your account"), f))
}

// changePassword: POST /account/password → the current password checked, the new one stored,
// and every other session of the user ended (their sockets and streams too).
func (s *Server) changePassword(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	// The current password is guessed no faster here than at sign-in.
	try, wait, err := s.startPasswordTry(c, u.Name)
	if err != nil {
		return err
	}
	if wait > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
		return s.renderAccount(c, http.StatusTooManyRequests, views.AccountForm{Error: fmt.Sprintf("Too many wrong passwords. Try again in %s.", humanWait(retryAfterSeconds(wait)))})
	}
	ok, err := try.check(ctx, u.PasswordHash, c.FormValue("current"))
	if err != nil {
		return err
	}
	if !ok {
		return s.renderAccount(c, http.StatusUnprocessableEntity, views.AccountForm{Error: "The current password is wrong."})
	}
	hash, problem, err := s.newPassword(ctx, c.FormValue("password"))
	if err != nil {
		return err
	}
	if problem != "" {
		return s.renderAccount(c, http.StatusUnprocessableEntity, views.AccountForm{Error: problem})
	}
	if err := s.store.SetPassword(ctx, u.ID, hash); err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	var keep []byte
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		keep = sess.TokenHash
	}
	n, err := s.store.EndUserSessions(ctx, u.ID, keep)
	if err != nil {
		return fmt.Errorf("end the other sessions: %w", err)
	}
	s.live.ringAll()
	s.log.InfoContext(ctx, "password changed", "user_id", u.ID, "sessions_ended", n)
	return c.Redirect(http.StatusSeeOther, "/account?notice=password")
}

// signOutEverywhere: POST /account/signout-all → every session of the user ends, this one too
// (and the sockets and streams they opened).
func (s *Server) signOutEverywhere(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	n, err := s.store.EndUserSessions(ctx, u.ID, nil)
	if err != nil {
		return fmt.Errorf("sign out everywhere: %w", err)
	}
	s.live.ringAll()
	s.log.InfoContext(ctx, "signed out everywhere", "user_id", u.ID, "sessions_ended", n)
	s.clearCookie(c, s.sessionCookie())
	return c.Redirect(http.StatusSeeOther, "/login")
}
