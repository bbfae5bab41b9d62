package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Grant scopes.
const (
	GrantConversation = "conversation" // later calls of the tool in that conversation
	GrantUser         = "user"         // later calls of the tool in any conversation of the user
)

// Grant argument scopes: which arguments of the tool's later calls a grant covers.
const (
	GrantArgsExact = "exact" // only calls whose canonical arguments hash to ArgsHash
	GrantArgsAny   = "any"   // every call of the tool (offered only for a tool without rules)
)

// Grant is a remembered approval: later calls of Tool by UserID's conversations (all of them, or
// ConversationID's alone) with the arguments it covers run without a suspension until ExpiresAt
// or until it is revoked. It stands in for the owner's plain approval only: the agent never lets
// it open a gate that a rule of the tool set (agent/gate.go).
type Grant struct {
	ID             string
	UserID         string
	Tool           string
	Scope          string // GrantConversation or GrantUser
	ConversationID string // the conversation it was made in (the one it covers, for that scope)
	ToolCallID     string // the approval that made it
	CreatedBy      string // who approved
	CreatedAt      time.Time
	ExpiresAt      time.Time
	RevokedAt      *time.Time
	ArgsScope      string // GrantArgsExact or GrantArgsAny
	ArgsHash       string // the canonical hash of the arguments covered (GrantArgsExact); else ""
}

// Claim is a reviewer's "I am looking at this" on a pending approval, until ExpiresAt or until
// they release it. It informs the other reviewers; it blocks nobody's decision.
type Claim struct {
	ConversationID string
	ToolCallID     string
	UserID         string
	ClaimedAt      time.Time
	ExpiresAt      time.Time
}

// NotifyMessage is one notification in the outbox: its payload (JSON), posted to the
// operator's webhook with ID as the Standard Webhooks webhook-id on every attempt.
type NotifyMessage struct {
	ID            string
	Payload       []byte
	CreatedAt     time.Time
	Attempts      int       // failed attempts so far
	NextAttemptAt time.Time // zero when queued: due at once
	LastError     string
}

// AuditTimeFormat is how a record's time enters its hash: UTC, microseconds (both stores'
// resolution).
const AuditTimeFormat = "2006-01-02T15:04:05.000000Z"

// AuditHash is the hash that chains r after the record whose hash is prev (empty for the first):
// the hex SHA-256 of prev and r's fields, each written as its length in bytes, a colon, the
// bytes and a newline, so no two records write alike. PostgreSQL computes the same in
// parley_chain_audit (migration 008); the conformance suite checks that they agree.
func AuditHash(prev string, r AuditRecord) string {
	var buf [512]byte
	b := buf[:0]
	field := func(f string) {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, '\n')
	}
	var seq [20]byte
	field(prev)
	field(string(strconv.AppendInt(seq[:0], r.Seq, 10)))
	field(r.ConversationID)
	field(r.ToolCallID)
	field(r.Tool)
	field(r.ActorID)
	field(r.Action)
	field(r.Reason)
	field(r.ArgsHash)
	field(string(r.Detail))
	var at [32]byte
	field(string(r.At.UTC().Truncate(time.Microsecond).AppendFormat(at[:0], AuditTimeFormat)))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ChainBreak says where a chain stops being intact: the first record that does not follow from
// the one before it, and why.
type ChainBreak struct {
	Seq    int64
	ID     int64
	Reason string
}

func (b *ChainBreak) Error() string {
	return fmt.Sprintf("audit record %d (id %d) breaks the chain: %s", b.Seq, b.ID, b.Reason)
}

// ChainVerifier checks records in chain order, one at a time, so a chain of any length is
// verified in constant memory. The zero value expects the chain's first record.
type ChainVerifier struct {
	seq  int64
	hash string
	n    int64
}

// Next checks the record that follows those seen so far; a *ChainBreak when it does not follow.
func (v *ChainVerifier) Next(r AuditRecord) error {
	switch {
	case r.Seq != v.seq+1:
		return &ChainBreak{Seq: r.Seq, ID: r.ID, Reason: fmt.Sprintf("place %d follows place %d (a record is missing or out of order)", r.Seq, v.seq)}
	case r.PrevHash != v.hash:
		return &ChainBreak{Seq: r.Seq, ID: r.ID, Reason: "its prev_hash is not the previous record's hash"}
	case AuditHash(v.hash, r) != r.Hash:
		return &ChainBreak{Seq: r.Seq, ID: r.ID, Reason: "its contents do not match its hash (the record was changed)"}
	}
	v.seq, v.hash = r.Seq, r.Hash
	v.n++
	return nil
}

// Verified is how many records have been checked so far, and the newest one's hash.
func (v *ChainVerifier) Verified() (n int64, head string) { return v.n, v.hash }
