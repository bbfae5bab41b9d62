package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestNewURLIsolatedAndDropped(t *testing.T) {
	var a, b string
	t.Run("create", func(t *testing.T) {
		a, b = NewURL(t), NewURL(t)
		if a == b {
			t.Fatalf("two calls returned the same database %s", a)
		}
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, a)
		if err != nil {
			t.Fatalf("connect to new database: %v", err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("new database has %d tables, want 0", n)
		}
	})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, raw := range []string{a, b} {
		u, _ := url.Parse(raw)
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, u.Path[1:]).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after the test ended", u.Path)
		}
	}
}

func TestRedactedHidesPassword(t *testing.T) {
	u, _ := url.Parse("postgres://alice:s3cret@db.example:5432/parley")
	got := redacted(u)
	if want := `db.example:5432 (database "/parley")`; got != want {
		t.Fatalf("redacted = %q, want %q", got, want)
	}
}

// fatalRecorder catches Fatalf the way testing does: it records and ends the goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNewURLFailsWhenServerAbsent(t *testing.T) {
	t.Setenv("TEST_DATABASE_URL", "postgres://postgres:hunter2@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		NewURL(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "does not answer at 127.0.0.1:1") {
		t.Fatalf("want a failure naming the server, got %q", rec.msg)
	}
	if strings.Contains(rec.msg, "hunter2") {
		t.Fatalf("failure message leaks the password: %q", rec.msg)
	}
}
