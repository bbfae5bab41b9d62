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
