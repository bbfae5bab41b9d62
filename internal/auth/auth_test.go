package auth

import (
	"bytes"
	"fmt"
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
		if !CheckPassword(h, tc.pw, bcrypt.MinCost) || CheckPassword(h, tc.pw+"!", bcrypt.MinCost) || bytes.Contains(h, []byte(tc.pw)) {
			t.Fatalf("len %d: check failed", len(tc.pw))
		}
	}
	if CheckPassword(nil, "anything", bcrypt.MinCost) {
		t.Fatal("an unknown user's password matched")
	}
}

// TestUnknownUserSpendsTheHashCost: the comparison for an unknown user is against a hash of
// the cost passwords are hashed at (the default when 0), so it takes as long as a real one.
func TestUnknownUserSpendsTheHashCost(t *testing.T) {
	for _, tc := range []struct{ cost, want int }{{bcrypt.MinCost, bcrypt.MinCost}, {5, 5}, {0, bcrypt.DefaultCost}} {
		got, err := bcrypt.Cost(dummyHash(tc.cost))
		if err != nil || got != tc.want {
			t.Errorf("dummy hash for cost %d has cost %d (%v), want %d", tc.cost, got, err, tc.want)
		}
	}
	if !bytes.Equal(dummyHash(5), dummyHash(5)) {
		t.Error("the dummy hash is made again on every use")
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

// TestProgressiveThrottle: an account's failures slow its next tries (doubling, capped) but
// never lock it for longer than the cap, whoever fails on its name.
func TestProgressiveThrottle(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th := NewProgressive(clk, 3, time.Hour, time.Second, 8*time.Second)
	for range 3 {
		th.Fail("ann")
	}
	if w := th.Wait("ann"); w != time.Second {
		t.Fatalf("after the free failures: wait %v, want 1s", w)
	}
	var waits []time.Duration
	for range 5 {
		th.Fail("ann")
		waits = append(waits, th.Wait("ann"))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	clk.Advance(8 * time.Second)
	if w := th.Wait("ann"); w != 0 {
		t.Fatalf("still waiting after the cap: %v", w)
	}
}

// TestThrottleEvictsWhenFull: a full table makes room for a new key instead of not tracking it.
func TestThrottleEvictsWhenFull(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	th := NewThrottle(clk, 1, time.Hour)
	th.maxKeys = 10
	for i := range 10 {
		th.Fail(fmt.Sprint("flood", i))
	}
	th.Fail("attacker")
	if w := th.Wait("attacker"); w == 0 {
		t.Fatal("a full table stopped tracking a new key")
	}
	if len(th.keys) > 10 {
		t.Fatalf("the table grew to %d", len(th.keys))
	}
}
