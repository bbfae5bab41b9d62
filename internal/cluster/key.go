package cluster

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The cluster's key seals what the processes send each other through PostgreSQL: every
// notification, and the bodies too large for one that wait in cluster_mail. It is never in the
// database — whoever may read a table (or LISTEN, which needs no privilege) must not be able to
// seal a request — but in each process's configuration (Config.Key; the app reads it from
// PARLEY_CLUSTER_KEY or a file). Config.PreviousKey, during a rotation, opens what was sealed
// with the key before: a process seals with its current key and opens with either.

// KeySize is the length of a cluster key: random bytes, written as base64 or hex (ParseKey).
const KeySize = 32

// NewKey returns a fresh random key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// ParseKey reads a key written as base64 (standard or URL alphabet, padded or not) or hex of
// KeySize random bytes, such as `openssl rand -base64 32` prints. Its errors never repeat the
// text, a secret.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != KeySize {
				return nil, fmt.Errorf("a cluster key is %d random bytes, not %d (make one with: openssl rand -base64 %d)", KeySize, len(k), KeySize)
			}
			return k, nil
		}
	}
	return nil, fmt.Errorf("a cluster key is %d random bytes in base64 or hex (make one with: openssl rand -base64 %d)", KeySize, KeySize)
}

// Associated data: what a sealed text is for. A notification cannot pass for a mail body or
// the reverse, and a mail body opens only for the one notification it was written with.
const (
	noteAD = "parley cluster notification v1"
	mailAD = "parley cluster mail v1"
)

// mailBinding is the associated data of the mail body of msg: its sender, its sequence
// number (unique per sender) and its channel, all sealed in the notification that names it.
func mailBinding(msg message) []byte {
	return []byte(mailAD + "\x00" + msg.From + "\x00" + strconv.FormatUint(msg.N, 10) + "\x00" + msg.Ch)
}

// keyring seals with the current key and opens with the current or the previous one.
type keyring struct {
	seals cipher.AEAD
	opens []cipher.AEAD // the current first
}

// newKeyring derives the AES-256-GCM keys from the configured ones (HKDF-SHA256).
func newKeyring(current, previous []byte) (*keyring, error) {
	if len(current) == 0 {
		return nil, errors.New("cluster: no key: every process of a cluster needs the same key (Config.Key; PARLEY_CLUSTER_KEY)")
	}
	k := &keyring{}
	for i, key := range [][]byte{current, previous} {
		if i > 0 && len(key) == 0 {
			break
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("cluster: a key is %d bytes, not %d", KeySize, len(key))
		}
		derived, err := hkdf.Key(sha256.New, key, nil, "parley cluster seal v1", 32)
		if err != nil {
			return nil, fmt.Errorf("cluster: derive the key: %w", err)
		}
		block, err := aes.NewCipher(derived)
		if err != nil {
			return nil, fmt.Errorf("cluster: key: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("cluster: key: %w", err)
		}
		k.opens = append(k.opens, aead)
	}
	k.seals = k.opens[0]
	return k, nil
}

// seal encrypts and authenticates plain for ad: a random nonce, then the sealed text.
func (k *keyring) seal(plain, ad []byte) []byte {
	nonce := make([]byte, k.seals.NonceSize(), k.seals.NonceSize()+len(plain)+k.seals.Overhead())
	_, _ = rand.Read(nonce)
	return k.seals.Seal(nonce, nonce, plain, ad)
}

// open reverses seal, with either key.
func (k *keyring) open(sealed, ad []byte) ([]byte, error) {
	for _, aead := range k.opens {
		if len(sealed) < aead.NonceSize() {
			break
		}
		if plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], ad); err == nil {
			return plain, nil
		}
	}
	return nil, errors.New("not sealed by this cluster")
}
