package auth

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/clock"
)

func TestPasswords(t *testing.T) {
	for _, tc := range []struct {
		pw string
		ok bool
	}{{"short", false}, {strings.Repeat("x", 8), true}, {strings.Repeat("x", 72), true}, {strings.Repeat("x", 73), false}} {
		h, err := HashPassword(tc.pw, bcrypt.MinCost)
		if (err == nil) != tc.ok {
			t.Fatalf("len %d: err %v", len(tc.pw), err)
		}
		if err != nil {
			continue
		}
		if !CheckPassword(h, tc.pw) || CheckPassword(h, tc.pw+"!") || bytes.Contains(h, []byte(tc.pw)) {
			t.Fatalf("len %d: check failed", len(tc.pw))
		}
	}
	if CheckPassword(nil, "anything") {
		t.Fatal("an unknown user's password matched")
	}
}

func TestSecrets(t *testing.T) {
	a, b := NewSecret(TokenPrefix), NewSecret(TokenPrefix)
	if a == b || !strings.HasPrefix(a, "pt_") || len(a) != 3+43 {
		t.Fatalf("secrets %q %q", a, b)
	}
	if bytes.Equal(Hash(a), Hash(b)) || len(Hash(a)) != 32 {
		t.Fatal("hashes")
	}
	if !Equal(a, a) || Equal(a, b) || Equal("", "") {
		t.Fatal("Equal")
	}
}

// TestThrottle: max failures within the window lock a key until the window since its first
// failure ends; other keys are independent; success clears; an old failure does not count.
func TestThrottle(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th := NewThrottle(clk, 3, 10*time.Minute)
	th.Fail("a")
	clk.Advance(time.Minute)
	th.Fail("a")
	if w := th.Wait("a"); w != 0 {
		t.Fatalf("locked after 2 of 3: %v", w)
	}
	th.Fail("a")
	if w := th.Wait("a"); w != 9*time.Minute {
		t.Fatalf("wait %v, want 9m (window from the first failure)", w)
	}
	if w := th.Wait("b"); w != 0 {
		t.Fatalf("another key waits %v", w)
	}
	clk.Advance(9 * time.Minute)
	if w := th.Wait("a"); w != 0 {
		t.Fatalf("still locked after the window: %v", w)
	}
	// A fresh window: failures long apart never lock.
	for i := 0; i < 5; i++ {
		th.Fail("c")
		clk.Advance(6 * time.Minute)
		th.Fail("c")
		clk.Advance(5 * time.Minute)
	}
	if w := th.Wait("c"); w != 0 {
		t.Fatalf("spread-out failures locked: %v", w)
	}
	th.Fail("d")
	th.Fail("d")
	th.Succeed("d")
	th.Fail("d")
	th.Fail("d")
	if w := th.Wait("d"); w != 0 {
		t.Fatalf("success did not clear: %v", w)
	}
}
