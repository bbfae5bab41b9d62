package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/storetest"
)

func TestOpenCreatesDirAndReopens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "dir", "parley.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "u1", Title: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.Append(ctx, c.ID, 0, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "u1", Data: json.RawMessage(`{"text":"hello"}`)}}})
	if err != nil || seq != 1 {
		t.Fatalf("append = %d, %v", seq, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	es, err := s.Log(ctx, c.ID, 0)
	if err != nil || len(es) != 1 || string(es[0].Data) != `{"text":"hello"}` {
		t.Fatalf("log after reopen = %+v, %v", es, err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.Exec(ctx, `PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(ctx, path)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("open of a newer file: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestWithClockStampsAndExpires(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "parley.db"), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.CheckClock(t, s, clk, t0)
}

func TestOpenRejectsUnusablePath(t *testing.T) {
	for _, p := range []string{"", filepath.Join(t.TempDir(), "a?mode=ro"), filepath.Join(t.TempDir(), "b#c")} {
		if s, err := Open(context.Background(), p); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded; the DSN would be misread", p)
		}
	}
}

// TestReadyNamesSchemaDrift checks that store.Ready (the /readyz check) reports a file whose
// schema version is not the binary's.
func TestReadyNamesSchemaDrift(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "parley.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, st := range []struct {
		version int
		want    error
	}{{schemaVersion, nil}, {schemaVersion + 1, store.ErrSchemaTooNew}, {0, store.ErrSchemaBehind}} {
		if _, err := s.DB.Exec(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, st.version)); err != nil {
			t.Fatal(err)
		}
		err := store.Ready(ctx, s)
		if st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("at version %d: Ready = %v, want %v", st.version, err, st.want)
		}
	}
}
