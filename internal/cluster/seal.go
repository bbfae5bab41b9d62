package cluster

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// loadKey reads the cluster's sealing key, making it when this is the first process.
func (n *Node) loadKey(ctx context.Context) error {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return fmt.Errorf("cluster: make a key: %w", err)
	}
	var key []byte
	err := n.pool.QueryRow(ctx, `WITH made AS (INSERT INTO cluster_secret (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING RETURNING key)
		SELECT key FROM made UNION ALL SELECT key FROM cluster_secret WHERE id = 1 LIMIT 1`, fresh).Scan(&key)
	if err != nil {
		return fmt.Errorf("cluster: read the key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("cluster: key: %w", err)
	}
	if n.aead, err = cipher.NewGCM(block); err != nil {
		return fmt.Errorf("cluster: key: %w", err)
	}
	return nil
}

// seal encrypts and authenticates a notification's payload; open reverses it and refuses
// whatever the key did not seal (another role's NOTIFY).
func (n *Node) seal(plain []byte) string {
	nonce := make([]byte, n.aead.NonceSize(), n.aead.NonceSize()+len(plain)+n.aead.Overhead())
	_, _ = rand.Read(nonce)
	return base64.StdEncoding.EncodeToString(n.aead.Seal(nonce, nonce, plain, nil))
}

func (n *Node) open(payload string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil || len(b) < n.aead.NonceSize() {
		return nil, errors.New("not a sealed notification")
	}
	return n.aead.Open(nil, b[:n.aead.NonceSize()], b[n.aead.NonceSize():], nil)
}
