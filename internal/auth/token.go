package auth

import (
	"context"
	"fmt"
	"time"

	"parley/internal/store"
)

// TokenPrefix starts every API token, so a leaked one is recognisable in logs and scanners.
const TokenPrefix = "pt_"

// CreateToken stores a new API token for userID and returns its secret, which exists nowhere
// else: the store keeps only its SHA-256. The tokens page and `web token create` both use it.
func CreateToken(ctx context.Context, st store.Store, now time.Time, userID, name string) (string, store.APIToken, error) {
	secret := NewSecret(TokenPrefix)
	t, err := st.CreateAPIToken(ctx, store.APIToken{UserID: userID, Name: name, Hash: Hash(secret), CreatedAt: now})
	if err != nil {
		return "", store.APIToken{}, fmt.Errorf("create API token: %w", err)
	}
	return secret, t, nil
}
