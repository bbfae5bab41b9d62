package store

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"
	"time"
)

// The audit trail's chain is keyed: each record's hash is an HMAC-SHA256, under a key kept
// outside the database, of the previous record's hash and the record (AuditKey.Link). Whoever
// can write the database but does not hold the key can neither change a record and recompute
// the chain after it nor append a record of their own; a record removed from the middle breaks
// the chain at the next one. What the key alone cannot show is a tail cut off (the newest
// records deleted, the chain still intact up to its new end): for that the chain's head is
// signed with the key and written outside the database after each commit (AuditHead, an
// anchor), and verification checks the chain reaches the newest anchor.
//
// Records written before the chain was keyed (migration 020) keep
// their unkeyed SHA-256 hashes (AuditHash) and an empty KeyID. They are accepted only as the
// chain's prefix: the first keyed record's HMAC covers the last unkeyed record's hash, and so,
// transitively, every unkeyed record before it.

// MinAuditKeyLen is the shortest secret NewAuditKey accepts, in bytes.
const MinAuditKeyLen = 32

// AuditKey keys the audit chain and signs its anchors. Its subkeys are derived from one
// secret, so a record's link and an anchor's signature are never interchangeable.
type AuditKey struct {
	record, anchor []byte
	id             string
	links          sync.Pool // of *linker: verifying a long chain allocates little
}

// NewAuditKey derives the chain's keys from secret (at least MinAuditKeyLen bytes).
func NewAuditKey(secret []byte) (*AuditKey, error) {
	if len(secret) < MinAuditKeyLen {
		return nil, fmt.Errorf("the audit key must be at least %d bytes, not %d", MinAuditKeyLen, len(secret))
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return &AuditKey{
		record: derive("parley audit record key v1"),
		anchor: derive("parley audit anchor key v1"),
		id:     hex.EncodeToString(derive("parley audit key id v1")[:6]),
	}, nil
}

// RandomAuditKey is a key of 32 random bytes, for a store given none: its records are
// unforgeable but can be verified only while it is alive (tests, tools).
func RandomAuditKey() *AuditKey {
	b := make([]byte, MinAuditKeyLen)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	k, _ := NewAuditKey(b)
	return k
}

// ID names the key without revealing it: 12 hex digits, stored with each record it keyed
// (AuditRecord.KeyID), so verification can say "keyed with another key" rather than "changed".
func (k *AuditKey) ID() string { return k.id }

// auditFields writes a record's fields as AuditHash does: each as its length in bytes, a
// colon, the bytes and a newline.
func auditFields(b []byte, prev string, r AuditRecord) []byte {
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
	return b
}

// Link is the hash that chains r after the record whose hash is prev (empty for the first):
// the hex HMAC-SHA256, under the key, of a version tag, prev and r's fields (as AuditHash
// writes them; r.Seq included, r.ID and r.KeyID not).
func (k *AuditKey) Link(prev string, r AuditRecord) string {
	l, _ := k.links.Get().(*linker)
	if l == nil {
		l = &linker{mac: hmac.New(sha256.New, k.record), buf: make([]byte, 0, 512)}
	}
	l.buf = auditFields(append(l.buf[:0], "parley-audit-record/v1\n"...), prev, r)
	l.mac.Reset()
	l.mac.Write(l.buf)
	link := hex.EncodeToString(l.mac.Sum(l.sum[:0]))
	k.links.Put(l)
	return link
}

// linker is an HMAC state and the buffer a record is written to for it.
type linker struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// AuditHead is an anchor: the audit chain's head as a process committed it — the newest
// record's place and hash — signed with the key and kept outside the database (an append-only
// file, the notification webhook). Legacy is how many records at the start of the chain are
// unkeyed (written before the chain was keyed): a record after those must be keyed.
type AuditHead struct {
	V      int       `json:"v"`
	Seq    int64     `json:"seq"`
	Hash   string    `json:"hash"`
	KeyID  string    `json:"key_id"`
	Legacy int64     `json:"legacy"`
	At     time.Time `json:"at"`
	MAC    string    `json:"mac"`
}

func (k *AuditKey) headMAC(h AuditHead) string {
	b := []byte("parley-audit-anchor/v1\n")
	for _, f := range []string{strconv.Itoa(h.V), strconv.FormatInt(h.Seq, 10), h.Hash, h.KeyID, strconv.FormatInt(h.Legacy, 10),
		h.At.UTC().Format(time.RFC3339Nano)} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, '\n')
	}
	m := hmac.New(sha256.New, k.anchor)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// SignHead returns h stamped with the key's id and version 1, its time in UTC, and signed.
func (k *AuditKey) SignHead(h AuditHead) AuditHead {
	h.V, h.KeyID, h.At = 1, k.id, h.At.UTC()
	h.MAC = k.headMAC(h)
	return h
}

// ErrAnchorSignature is an anchor whose signature is not the key's: forged, changed, or signed
// with another key.
var ErrAnchorSignature = errors.New("anchor signature does not match the audit key")

// CheckHead verifies h's signature.
func (k *AuditKey) CheckHead(h AuditHead) error {
	if h.V != 1 {
		return fmt.Errorf("anchor version %d is not known", h.V)
	}
	if h.KeyID != k.id {
		return fmt.Errorf("%w: signed with key %s, the configured key is %s", ErrAnchorSignature, h.KeyID, k.id)
	}
	if !hmac.Equal([]byte(k.headMAC(h)), []byte(h.MAC)) {
		return ErrAnchorSignature
	}
	return nil
}

// AuditAnchor takes the chain's head after each commit that moved it. Anchor must not block
// for long: it is called on the committing goroutine, after the commit (a sink queues the head
// and writes it elsewhere). Heads may arrive out of order from concurrent commits; a sink keeps
// the highest Seq. The head is signed (AuditKey.SignHead) and stamped with the commit's time.
type AuditAnchor interface {
	Anchor(h AuditHead)
}
