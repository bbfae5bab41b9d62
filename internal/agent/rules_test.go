package agent

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	m := &Manager{cfg: Config{RetryBase: time.Second, RetryMax: 10 * time.Second}}
	cases := []struct {
		failures   int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 500 * time.Millisecond, time.Second},
		{2, 0, time.Second, 2 * time.Second},
		{3, 0, 2 * time.Second, 4 * time.Second},
		{4, 0, 4 * time.Second, 8 * time.Second},
		{5, 0, 5 * time.Second, 10 * time.Second}, // capped at RetryMax
		{60, 0, 5 * time.Second, 10 * time.Second},
		{1, 42 * time.Second, 42 * time.Second, 42 * time.Second}, // Retry-After wins
	}
	for _, c := range cases {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := m.backoff(c.failures, c.retryAfter)
			if d < c.lo || d > c.hi {
				t.Fatalf("backoff(%d, %s) = %s, want within [%s, %s]", c.failures, c.retryAfter, d, c.lo, c.hi)
			}
			seen[d] = true
		}
		if c.lo != c.hi && len(seen) < 2 {
			t.Errorf("backoff(%d) has no jitter", c.failures)
		}
	}
}

func TestSubscriptionClose(t *testing.T) {
	h := NewHub(4)
	s := h.Subscribe("c")
	g := h.Subscribe("")
	h.Publish(Event{ConversationID: "c", Type: EventStatus})
	h.Publish(Event{ConversationID: "other", Type: EventStatus})
	s.Close()
	s.Close() // twice is harmless
	if ev, ok := <-s.C; !ok || ev.ConversationID != "c" {
		t.Fatalf("buffered event lost: %+v %v", ev, ok)
	}
	if _, ok := <-s.C; ok {
		t.Fatal("C not closed after Close")
	}
	if len(g.C) != 2 {
		t.Fatalf("the global subscriber has %d events, want both conversations'", len(g.C))
	}
	h.Publish(Event{ConversationID: "c"}) // no subscriber left for c: nothing blocks
	h.Close()
	n := 0
	for range g.C {
		n++
	}
	if n != 3 {
		t.Fatalf("global got %d events", n)
	}
}

func TestCanonicalHashIgnoresKeyOrderAndSpace(t *testing.T) {
	a := canonicalHash([]byte(`{"b":1,"a":[1,2]}`))
	b := canonicalHash([]byte(`{ "a": [1, 2], "b": 1 }`))
	c := canonicalHash([]byte(`{"a":[2,1],"b":1}`))
	if a != b || a == c || len(a) != 64 {
		t.Fatalf("hashes %s %s %s", a, b, c)
	}
}
