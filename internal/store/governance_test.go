package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

func chain(n int) []AuditRecord {
	recs := make([]AuditRecord, n)
	prev := ""
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for i := range recs {
		r := AuditRecord{ID: int64(i + 1), Seq: int64(i + 1), ConversationID: "conv", ToolCallID: fmt.Sprint("call_", i), Tool: "send_email",
			ActorID: "u1", Action: "approve", ArgsHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Detail: json.RawMessage(`{"rule":1}`), At: at.Add(time.Duration(i) * time.Millisecond), PrevHash: prev}
		r.Hash = AuditHash(prev, r)
		prev = r.Hash
		recs[i] = r
	}
	return recs
}

func TestChainVerifier(t *testing.T) {
	recs := chain(5)
	var v ChainVerifier
	for _, r := range recs {
		if err := v.Next(r); err != nil {
			t.Fatal(err)
		}
	}
	if n, head := v.Verified(); n != 5 || head != recs[4].Hash {
		t.Fatalf("verified %d, head %s", n, head)
	}
	for name, mutate := range map[string]func([]AuditRecord) []AuditRecord{
		"changed reason": func(rs []AuditRecord) []AuditRecord { rs[2].Reason = "x"; return rs },
		"changed time":   func(rs []AuditRecord) []AuditRecord { rs[2].At = rs[2].At.Add(time.Microsecond); return rs },
		"removed":        func(rs []AuditRecord) []AuditRecord { return append(rs[:2], rs[3:]...) },
		"rehashed alone": func(rs []AuditRecord) []AuditRecord {
			rs[2].ActorID = "mallory"
			rs[2].Hash = AuditHash(rs[2].PrevHash, rs[2])
			return rs
		},
	} {
		rs := mutate(chain(5))
		var v ChainVerifier
		var err error
		for _, r := range rs {
			if err = v.Next(r); err != nil {
				break
			}
		}
		var br *ChainBreak
		if !errors.As(err, &br) || br.Seq > 4 || br.Seq < 3 {
			t.Errorf("%s: %v, want a break at record 3 or 4", name, err)
		}
	}
}

// BenchmarkVerifyMillion verifies a chain of a million records (what web audit verify does
// after reading them): the hashing alone, the store's reads aside.
func BenchmarkVerifyMillion(b *testing.B) {
	recs := chain(1_000_000)
	b.ResetTimer()
	for b.Loop() {
		var v ChainVerifier
		for _, r := range recs {
			if err := v.Next(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// keyedChain is chain(n) with its records from place legacy+1 on linked under k.
func keyedChain(k *AuditKey, n int, legacy int64) []AuditRecord {
	recs := chain(n)
	prev := ""
	for i := range recs {
		r := &recs[i]
		r.PrevHash = prev
		if r.Seq > legacy {
			r.KeyID, r.Hash = k.ID(), k.Link(prev, *r)
		} else {
			r.Hash = AuditHash(prev, *r)
		}
		prev = r.Hash
	}
	return recs
}

func testKey(t testing.TB, secret string) *AuditKey {
	t.Helper()
	k, err := NewAuditKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyedChain(t *testing.T) {
	k := testKey(t, "0123456789abcdef0123456789abcdef")
	if _, err := NewAuditKey([]byte("short")); err == nil {
		t.Fatal("a 5-byte key was accepted")
	}
	if other := testKey(t, "0123456789abcdef0123456789abcdeF"); other.ID() == k.ID() || len(k.ID()) != 12 {
		t.Fatalf("key ids %q and %q", k.ID(), other.ID())
	}
	run := func(v *ChainVerifier, rs []AuditRecord) error {
		for _, r := range rs {
			if err := v.Next(r); err != nil {
				return err
			}
		}
		return v.End()
	}
	recs := keyedChain(k, 6, 2)
	anchors := func(legacy int64, heads ...AuditRecord) *Anchors {
		var a Anchors
		for _, r := range heads {
			h := k.SignHead(AuditHead{Seq: r.Seq, Hash: r.Hash, Legacy: legacy, At: time.Now()})
			if err := k.CheckHead(h); err != nil {
				t.Fatal(err)
			}
			a.Add(h)
		}
		return &a
	}
	v := ChainVerifier{Key: k, Anchors: anchors(2, recs[3], recs[5])}
	if err := run(&v, recs); err != nil || v.Unkeyed() != 2 {
		t.Fatalf("a chain with 2 unkeyed then 4 keyed records: %v, %d unkeyed", err, v.Unkeyed())
	}
	wantBreak := func(name string, err error, seq int64) {
		t.Helper()
		var br *ChainBreak
		if !errors.As(err, &br) || br.Seq != seq {
			t.Errorf("%s: %v, want a break at record %d", name, err, seq)
		}
	}
	wantBreak("no key", run(&ChainVerifier{}, recs), 3)
	wantBreak("another key", run(&ChainVerifier{Key: testKey(t, "another key, 32 bytes long at least")}, recs), 3)
	wantBreak("truncated", run(&ChainVerifier{Key: k, Anchors: anchors(2, recs[5])}, recs[:4]), 5)
	wantBreak("unkeyed past the anchors' prefix", run(&ChainVerifier{Key: k, Anchors: anchors(1, recs[5])}, recs), 2)
	// Rewritten from record 4 on with the unkeyed hash, as someone without the key can.
	forged := keyedChain(k, 6, 2)
	forged[3].ActorID = "mallory"
	for i := 3; i < 6; i++ {
		forged[i].PrevHash = forged[i-1].Hash
		forged[i].Hash = AuditHash(forged[i].PrevHash, forged[i])
	}
	wantBreak("rehashed", run(&ChainVerifier{Key: k}, forged), 4)
	for i := 3; i < 6; i++ {
		forged[i].KeyID = ""
	}
	wantBreak("passed off as unkeyed", run(&ChainVerifier{Key: k}, forged), 4)
	// The head's signature covers every field.
	h := k.SignHead(AuditHead{Seq: 6, Hash: recs[5].Hash, Legacy: 2, At: time.Now()})
	for name, change := range map[string]func(*AuditHead){
		"seq": func(h *AuditHead) { h.Seq-- }, "hash": func(h *AuditHead) { h.Hash = recs[4].Hash },
		"legacy": func(h *AuditHead) { h.Legacy++ }, "at": func(h *AuditHead) { h.At = h.At.Add(time.Second) },
		"key": func(h *AuditHead) { h.KeyID = "000000000000" },
	} {
		c := h
		change(&c)
		if err := k.CheckHead(c); !errors.Is(err, ErrAnchorSignature) {
			t.Errorf("a head with its %s changed: %v", name, err)
		}
	}
	// A record's link is not a head's signature (the subkeys differ).
	if k.Link("", recs[0]) == AuditHash("", recs[0]) {
		t.Fatal("the keyed link is the unkeyed hash")
	}
}

// BenchmarkVerifyMillionKeyed is BenchmarkVerifyMillion for a keyed chain (HMAC-SHA256 links).
func BenchmarkVerifyMillionKeyed(b *testing.B) {
	k := testKey(b, "0123456789abcdef0123456789abcdef")
	recs := keyedChain(k, 1_000_000, 0)
	b.ResetTimer()
	for b.Loop() {
		v := ChainVerifier{Key: k}
		for _, r := range recs {
			if err := v.Next(r); err != nil {
				b.Fatal(err)
			}
		}
	}
}
