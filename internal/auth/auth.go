// Package auth holds the primitives of signing in: password hashing (bcrypt), random secrets
// whose SHA-256 alone is stored (session cookies, API tokens, CSRF tokens), and the login
// throttle; and the account rules (account.go) that the web and the commands both ask: what
// names, roles, token labels, scopes and expiries may be, and how tokens and invitations are
// made.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// MinPasswordLen is the shortest password accepted at sign-up.
const MinPasswordLen = 8

// maxPasswordLen is bcrypt's input limit: longer passwords would be silently truncated.
const maxPasswordLen = 72

// ErrWeakPassword rejects a password outside the accepted length.
var ErrWeakPassword = fmt.Errorf("a password has %d to %d characters", MinPasswordLen, maxPasswordLen)

// HashPassword returns the bcrypt hash of password at cost (bcrypt.DefaultCost when 0).
func HashPassword(password string, cost int) ([]byte, error) {
	if len(password) < MinPasswordLen || len(password) > maxPasswordLen {
		return nil, ErrWeakPassword
	}
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		return nil, fmt.Errorf("hash password: %w", err)
	}
	return h, nil
}

// dummyHashes holds, per bcrypt cost, the hash compared against when the user does not exist,
// so a wrong name costs as much time as a wrong password and timing does not reveal which
// names exist. Each is made on first use: a program (or test binary) that never meets an
// unknown name does not spend a bcrypt hash at start.
var dummyHashes sync.Map // int → []byte

// dummyHash is the hash of a fixed password at cost (bcrypt.DefaultCost when 0).
func dummyHash(cost int) []byte {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	if h, ok := dummyHashes.Load(cost); ok {
		return h.([]byte)
	}
	h, err := bcrypt.GenerateFromPassword([]byte("parley-dummy-password"), cost)
	if err != nil {
		// Only a cost outside bcrypt's range fails; HashPassword refuses it the same way.
		h, _ = bcrypt.GenerateFromPassword([]byte("parley-dummy-password"), bcrypt.DefaultCost)
	}
	actual, _ := dummyHashes.LoadOrStore(cost, h)
	return actual.([]byte)
}

// CheckPassword reports whether password matches hash. A nil hash (unknown user) or an
// over-long password still spends a bcrypt comparison, against a hash of cost (the cost
// passwords are hashed at, as given to HashPassword: bcrypt.DefaultCost when 0), and returns
// false.
func CheckPassword(hash []byte, password string, cost int) bool {
	// bcrypt compares only the first 72 bytes; a longer password was never accepted, so it
	// must not match the hash of its prefix.
	if len(hash) == 0 || len(password) > maxPasswordLen {
		_ = bcrypt.CompareHashAndPassword(dummyHash(cost), []byte(password))
		return false
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	return err == nil
}

// NewSecret returns a random URL-safe secret with prefix (e.g. "pt_" for API tokens) carrying
// 256 bits of entropy.
func NewSecret(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ crashes instead).
		panic(errors.New("crypto/rand failed"))
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Hash is the SHA-256 of a secret: what the store keeps for session cookies and API tokens.
// A fast hash is right here because the secrets are random and long, not passwords.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Equal compares two secrets in constant time.
func Equal(a, b string) bool {
	return len(a) > 0 && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
