package store

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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

// AuditHash is the unkeyed hash of the records written before the chain was keyed (their
// KeyID is empty; auditkey.go): the hex SHA-256 of prev and r's fields, each written as its
// length in bytes, a colon, the bytes and a newline, so no two records write alike. Anyone can
// compute it, so it shows accidents, not tampering: new records are linked with AuditKey.Link.
func AuditHash(prev string, r AuditRecord) string {
	var buf [512]byte
	sum := sha256.Sum256(auditFields(buf[:0], prev, r))
	return hex.EncodeToString(sum[:])
}

// ChainBreak says where a chain stops being intact: the first record that does not follow from
// the one before it (or, for a truncated chain, the first one missing), and why.
type ChainBreak struct {
	Seq    int64
	ID     int64 // 0 when the record is missing
	Reason string
}

func (b *ChainBreak) Error() string {
	if b.ID == 0 {
		return fmt.Sprintf("audit record %d breaks the chain: %s", b.Seq, b.Reason)
	}
	return fmt.Sprintf("audit record %d (id %d) breaks the chain: %s", b.Seq, b.ID, b.Reason)
}

// Anchors are the chain's heads anchored outside the database (AuditHead), each already checked
// with the key (AuditKey.CheckHead): every one is a place the chain must pass through with that
// hash. Add them, in any order, then verify.
type Anchors struct {
	points []anchorPoint
	sorted bool
	legacy int64
	newest AuditHead
}

type anchorPoint struct {
	seq  int64
	hash [sha256.Size]byte // decoded: an anchor file of a million heads is read in 48 MB
	at   int64             // Unix microseconds
	bad  bool              // hash was not 64 hex digits
}

// Add records h, whose signature the caller checked.
func (a *Anchors) Add(h AuditHead) {
	p := anchorPoint{seq: h.Seq, at: h.At.UnixMicro()}
	if n, err := hex.Decode(p.hash[:], []byte(h.Hash)); err != nil || n != sha256.Size {
		p.bad = true
	}
	if len(a.points) == 0 || h.Legacy < a.legacy {
		a.legacy = h.Legacy
	}
	if len(a.points) == 0 || h.Seq > a.newest.Seq {
		a.newest = h
	}
	a.points = append(a.points, p)
	a.sorted = false
}

// Len is how many heads were added.
func (a *Anchors) Len() int { return len(a.points) }

// Newest is the head with the highest place (the zero head when there is none).
func (a *Anchors) Newest() AuditHead { return a.newest }

// Legacy is the shortest unkeyed prefix an anchor records: records after it must be keyed.
func (a *Anchors) Legacy() int64 { return a.legacy }

func (a *Anchors) sort() {
	if !a.sorted {
		slices.SortStableFunc(a.points, func(x, y anchorPoint) int { return cmp.Compare(x.seq, y.seq) })
		a.sorted = true
	}
}

// ChainVerifier checks records in chain order, one at a time, so a chain of any length is
// verified in constant memory (its anchors aside), then (End) that the chain reaches its newest
// anchor. Key is the chain's key: without it only unkeyed records can be checked. Anchors, when
// set, are the heads anchored outside the database: the record at each one's place must have its
// hash, the chain must reach the newest, and only the first Anchors.Legacy records may be
// unkeyed. Without anchors, a cut-off tail cannot be told from a chain that ends there. The zero
// value checks an unkeyed chain from its first record.
type ChainVerifier struct {
	Key     *AuditKey
	Anchors *Anchors

	seq    int64
	hash   string
	n      int64
	legacy int64
	keyed  bool
	next   int // the first anchor not passed yet
}

// Next checks the record that follows those seen so far; a *ChainBreak when it does not follow.
func (v *ChainVerifier) Next(r AuditRecord) error {
	brk := func(format string, args ...any) error {
		return &ChainBreak{Seq: r.Seq, ID: r.ID, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case r.Seq != v.seq+1:
		if r.Seq > v.seq+1 {
			return &ChainBreak{Seq: v.seq + 1, Reason: fmt.Sprintf("it is missing: record %d follows record %d", r.Seq, v.seq)}
		}
		return brk("place %d follows place %d (out of order)", r.Seq, v.seq)
	case r.PrevHash != v.hash:
		return brk("its prev_hash is not the previous record's hash")
	}
	if r.KeyID == "" {
		switch {
		case v.keyed:
			return brk("it is unkeyed (the hash scheme from before the chain was keyed) but follows keyed records: the chain was rewritten from here")
		case v.Anchors != nil && v.Anchors.Len() > 0 && r.Seq > v.Anchors.Legacy():
			return brk("it is unkeyed but the anchors say only the first %d records are: the chain was rewritten from here", v.Anchors.Legacy())
		case AuditHash(v.hash, r) != r.Hash:
			return brk("its contents do not match its hash (the record was changed)")
		}
		v.legacy++
	} else {
		switch {
		case v.Key == nil:
			return brk("it is keyed (key %s) and no audit key was given to check it", r.KeyID)
		case r.KeyID != v.Key.ID():
			return brk("it is keyed with key %s, not the configured key %s (another key, or a forged record)", r.KeyID, v.Key.ID())
		case v.Key.Link(v.hash, r) != r.Hash:
			return brk("its contents do not match its keyed hash (the record was changed, or the chain re-hashed without the key)")
		}
		v.keyed = true
	}
	if a := v.Anchors; a != nil {
		a.sort()
		for ; v.next < len(a.points) && a.points[v.next].seq <= r.Seq; v.next++ {
			p := a.points[v.next]
			if p.seq < r.Seq {
				continue // a place before the first record read (a chain read from the middle)
			}
			var h [sha256.Size]byte
			if n, err := hex.Decode(h[:], []byte(r.Hash)); p.bad || err != nil || n != sha256.Size || h != p.hash {
				return brk("its hash is not the one the anchor written at %s records for it (the chain was cut here and written again?)",
					time.UnixMicro(p.at).UTC().Format(time.RFC3339))
			}
		}
	}
	v.seq, v.hash = r.Seq, r.Hash
	v.n++
	return nil
}

// End reports a chain that stops before its newest anchor: the newest records were removed.
// The break names the first record missing.
func (v *ChainVerifier) End() error {
	if a := v.Anchors; a != nil && a.Len() > 0 && v.seq < a.newest.Seq {
		return &ChainBreak{Seq: v.seq + 1, Reason: fmt.Sprintf(
			"it is missing: the chain ends at record %d but the anchor written at %s records a head at %d (the newest records were removed)",
			v.seq, a.newest.At.UTC().Format(time.RFC3339), a.newest.Seq)}
	}
	return nil
}

// Verified is how many records have been checked so far, and the newest one's hash.
func (v *ChainVerifier) Verified() (n int64, head string) { return v.n, v.hash }

// Unkeyed is how many of the records checked so far are unkeyed (from before the chain was keyed).
func (v *ChainVerifier) Unkeyed() int64 { return v.legacy }
