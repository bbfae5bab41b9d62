package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"parley/internal/cluster"
	"parley/internal/store/pgtest"
)

// The cluster key comes from the environment or a file, never from the database: both at
// once, a malformed one (whose text no error repeats) and a previous one alone are refused;
// without any, production refuses and development makes one of its own, loudly.
func TestClusterKeySettings(t *testing.T) {
	cur, prev := cluster.NewKey(), cluster.NewKey()
	file := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(file, []byte(hex.EncodeToString(cur)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name     string
		env      map[string]string
		want     []byte // the current key; nil with own
		previous []byte
		own      bool
		err      string
	}{
		{name: "variable", env: map[string]string{"PARLEY_CLUSTER_KEY": b64(cur)}, want: cur},
		{name: "file", env: map[string]string{"PARLEY_CLUSTER_KEY_FILE": file}, want: cur},
		{name: "rotation", env: map[string]string{"PARLEY_CLUSTER_KEY": b64(cur), "PARLEY_CLUSTER_KEY_PREVIOUS": b64(prev)}, want: cur, previous: prev},
		{name: "rotation in production", env: map[string]string{"PARLEY_ENV": "production", "PARLEY_CLUSTER_KEY_FILE": file, "PARLEY_CLUSTER_KEY_PREVIOUS": hex.EncodeToString(prev)}, want: cur, previous: prev},
		{name: "both", env: map[string]string{"PARLEY_CLUSTER_KEY": b64(cur), "PARLEY_CLUSTER_KEY_FILE": file}, err: "not both"},
		{name: "short", env: map[string]string{"PARLEY_CLUSTER_KEY": "correct-horse-battery"}, err: "PARLEY_CLUSTER_KEY: a cluster key is 32 random bytes"},
		{name: "short previous", env: map[string]string{"PARLEY_CLUSTER_KEY": b64(cur), "PARLEY_CLUSTER_KEY_PREVIOUS": b64(prev[:16])}, err: "PARLEY_CLUSTER_KEY_PREVIOUS: a cluster key is 32 random bytes, not 16"},
		{name: "missing file", env: map[string]string{"PARLEY_CLUSTER_KEY_FILE": file + ".gone"}, err: "PARLEY_CLUSTER_KEY_FILE"},
		{name: "previous alone", env: map[string]string{"PARLEY_CLUSTER_KEY_PREVIOUS": b64(prev)}, err: "without PARLEY_CLUSTER_KEY"},
		{name: "none in production", env: map[string]string{"PARLEY_ENV": "production"}, err: "PARLEY_CLUSTER_KEY (or PARLEY_CLUSTER_KEY_FILE) must be set on PostgreSQL in production"},
		{name: "none in development", env: map[string]string{}, own: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := FromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			keys, err := cfg.clusterKeys(slog.New(slog.NewTextHandler(&logged, nil)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "correct-horse") {
					t.Fatalf("the error repeats the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.own:
				if !keys.own || len(keys.current) != cluster.KeySize || !strings.Contains(logged.String(), "PARLEY_CLUSTER_KEY is not set") {
					t.Fatalf("development without a key: own %v, %d bytes, logged %q", keys.own, len(keys.current), logged.String())
				}
			case keys.own || !bytes.Equal(keys.current, tc.want) || !bytes.Equal(keys.previous, tc.previous):
				t.Fatalf("keys %+v, want %x (previous %x)", keys, tc.want, tc.previous)
			}
		})
	}
}

// On PostgreSQL in production, a process without a cluster key does not start (before it
// touches the database); with one it does.
func TestProductionNeedsAClusterKey(t *testing.T) {
	url := pgtest.NewURL(t)
	cfg := Config{Addr: "127.0.0.1:0", DatabaseURL: url, DataDir: t.TempDir(), Model: "demo", Production: true, AuditKey: testAuditKey,
		Getenv: func(string) string { return "" }}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if a, err := New(context.Background(), cfg, Options{Logger: log}); err == nil || !strings.Contains(err.Error(), "PARLEY_CLUSTER_KEY") {
		if a != nil {
			_ = a.Close()
		}
		t.Fatalf("production on PostgreSQL without a cluster key: %v, want refused", err)
	}
	cfg.ClusterKey = testClusterKey
	a, err := New(context.Background(), cfg, Options{Logger: log})
	if err != nil {
		t.Fatalf("production on PostgreSQL with a cluster key: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
