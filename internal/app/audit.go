package app

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"parley/internal/auditanchor"
	"parley/internal/clock"
	"parley/internal/notify"
	"parley/internal/store"
	"parley/internal/tools/webhook"
)

// The audit chain's key and anchors (store/auditkey.go, package auditanchor). The key never
// goes into the database: from the environment, a file the operator names, or — in development
// only — a file generated once in the data directory, next to the embedded store, which keeps
// `make run` working with no configuration but protects nothing against whoever can write that
// directory.

// Development defaults, in PARLEY_DATA_DIR.
const (
	devAuditKeyFile    = "audit.key"
	devAuditAnchorFile = "audit-anchors.jsonl"
)

// errNoAuditKey: production without PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE.
var errNoAuditKey = errors.New("PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE is required in production: the audit trail's key, " +
	"kept outside the database (at least 32 random bytes, the same for every process on the database; e.g. `openssl rand -hex 32`)")

// loadAuditKey returns the audit chain's key: PARLEY_AUDIT_KEY, or the contents of
// PARLEY_AUDIT_KEY_FILE (a trailing newline dropped). Without either, production is refused
// (errNoAuditKey); development uses PARLEY_DATA_DIR/audit.key, generating it when it does not
// exist and create is set, and says so in a log line. It returns nil (no error) in development
// when there is no key and create is not set.
func loadAuditKey(cfg Config, log *slog.Logger, create bool) (*store.AuditKey, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.AuditKey != "" && cfg.AuditKeyFile != "":
		return nil, errors.New("set PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE, not both")
	case cfg.AuditKey != "":
		k, err := store.NewAuditKey([]byte(cfg.AuditKey))
		if err != nil {
			return nil, fmt.Errorf("PARLEY_AUDIT_KEY: %w", err)
		}
		return k, nil
	case cfg.AuditKeyFile != "":
		k, err := readAuditKey(cfg.AuditKeyFile, log)
		if err != nil {
			return nil, fmt.Errorf("PARLEY_AUDIT_KEY_FILE: %w", err)
		}
		return k, nil
	case cfg.Production:
		return nil, errNoAuditKey
	case cfg.DataDir == "":
		log.Warn("audit: no PARLEY_AUDIT_KEY and no data directory: the audit trail is keyed with a key of this process only, " +
			"so its records cannot be verified once it stops")
		return store.RandomAuditKey(), nil
	}
	path := filepath.Join(cfg.DataDir, devAuditKeyFile)
	k, err := readAuditKey(path, log)
	if err == nil {
		log.Info("audit: using the development audit key (set PARLEY_AUDIT_KEY_FILE in production)", "file", path)
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the development audit key: %w", err)
	}
	if !create {
		return nil, nil
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("the development audit key: %w", err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // crypto/rand.Read never returns an error
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another process made it first
		return readAuditKey(path, log)
	}
	if err != nil {
		return nil, fmt.Errorf("the development audit key: %w", err)
	}
	encoded := hex.EncodeToString(secret)
	_, err = f.WriteString(encoded + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("the development audit key: %w", err)
	}
	log.Warn("audit: no PARLEY_AUDIT_KEY or PARLEY_AUDIT_KEY_FILE; generated a development audit key beside the data "+
		"(it keys the audit trail's hash chain: keep it, and keep it out of the database's reach in production)", "file", path)
	return store.NewAuditKey([]byte(encoded))
}

// readAuditKey reads a key file: its contents, a trailing newline dropped. A file others may
// read is used, with a warning.
func readAuditKey(path string, log *slog.Logger) (*store.AuditKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("audit: the audit key file can be read by other users; chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
	k, err := store.NewAuditKey(bytes.TrimRight(b, "\r\n"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// auditAnchorFiles are the anchor files of cfg: PARLEY_AUDIT_ANCHOR_FILE, or in development
// PARLEY_DATA_DIR/audit-anchors.jsonl.
func auditAnchorFile(cfg Config) string {
	switch {
	case cfg.AuditAnchorFile != "":
		return cfg.AuditAnchorFile
	case !cfg.Production && cfg.DataDir != "":
		return filepath.Join(cfg.DataDir, devAuditAnchorFile)
	}
	return ""
}

// anchors fans a head out to several sinks.
type anchors []store.AuditAnchor

func (as anchors) Anchor(h store.AuditHead) {
	for _, a := range as {
		a.Anchor(h)
	}
}

// openAuditAnchors starts the anchors cfg asks for: the anchor file, the webhook. close stops
// them, after the store is closed (they flush what is waiting). Production without any is
// allowed, with a warning: a cut-off tail would go unnoticed.
func openAuditAnchors(cfg Config, clk clock.Clock, log *slog.Logger) (store.AuditAnchor, func(), error) {
	var sinks anchors
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	if path := auditAnchorFile(cfg); path != "" {
		if dir := filepath.Dir(path); dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, nil, fmt.Errorf("PARLEY_AUDIT_ANCHOR_FILE: %w", err)
			}
		}
		f, err := auditanchor.OpenFile(path, log)
		if err != nil {
			return nil, nil, fmt.Errorf("PARLEY_AUDIT_ANCHOR_FILE: %w", err)
		}
		sinks, closers = append(sinks, f), append(closers, func() { _ = f.Close() })
	}
	if cfg.AuditAnchorWebhook {
		secret, err := webhook.DecodeSecret(cfg.NotifySecret)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("PARLEY_NOTIFY_SECRET: %w", err)
		}
		s, err := notify.NewAnchorSender(notify.Config{URL: cfg.NotifyURL, Secret: secret, Production: cfg.Production, Clock: clk, Logger: log})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("audit anchors: %w", err)
		}
		sinks, closers = append(sinks, s), append(closers, s.Close)
	}
	if len(sinks) == 0 {
		log.Warn("audit: no anchor for the audit trail (PARLEY_AUDIT_ANCHOR_FILE, PARLEY_AUDIT_ANCHOR_WEBHOOK): " +
			"deleting its newest records would go unnoticed by `web audit verify`")
		return nil, func() {}, nil
	}
	return sinks, closeAll, nil
}
