package auditanchor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"parley/internal/store"
)

func key(t *testing.T, secret string) *store.AuditKey {
	t.Helper()
	k, err := store.NewAuditKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestFileWritesSignedHeadsAndReadsThemBack(t *testing.T) {
	k := key(t, "an anchor test key, 32 bytes long at least")
	path := filepath.Join(t.TempDir(), "anchors.jsonl")
	w, err := OpenFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	for seq := int64(1); seq <= 5; seq++ {
		w.Anchor(k.SignHead(store.AuditHead{Seq: seq, Hash: hash, Legacy: 2, At: at.Add(time.Duration(seq))}))
	}
	w.Anchor(k.SignHead(store.AuditHead{Seq: 3, Hash: hash, Legacy: 2, At: at})) // older than what is written or queued: dropped
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("anchor file: %v %v", fi, err)
	}
	anchors, warnings, err := Read(k, path, filepath.Join(t.TempDir(), "missing.jsonl"))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "does not exist") {
		t.Fatalf("Read = %v, %q", err, warnings)
	}
	if n := anchors.Len(); n < 1 || n > 5 || anchors.Newest().Seq != 5 || anchors.Legacy() != 2 || !anchors.Newest().At.Equal(at.Add(5)) {
		t.Fatalf("read %d anchors, the newest %+v, legacy %d", n, anchors.Newest(), anchors.Legacy())
	}

	// A line cut short at the end is skipped; a line changed, or signed with another key, is an
	// error.
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(s string) string {
		p := filepath.Join(t.TempDir(), "a.jsonl")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, warnings, err := Read(k, write(string(body)+`{"v":1,"seq":6,"ha`)); err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "cut short") {
		t.Fatalf("a torn last line: %v %q", err, warnings)
	}
	if _, _, err := Read(k, write(strings.Replace(string(body), `"seq":5`, `"seq":9`, 1))); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a changed line: %v", err)
	}
	if _, _, err := Read(key(t, "another anchor key, 32 bytes long at least"), path); err == nil || !strings.Contains(err.Error(), "signed with key") {
		t.Fatalf("another key: %v", err)
	}
	if _, _, err := Read(k, write("not json\n")); err == nil || !strings.Contains(err.Error(), "line 1 is not an anchor") {
		t.Fatalf("garbage: %v", err)
	}
}
