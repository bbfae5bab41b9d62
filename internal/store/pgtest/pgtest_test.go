package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

func TestDescribeHidesPassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://alice:s3cret@db.example:5432/parley",
		"host=db.example port=5432 user=alice password=s3cret dbname=parley",
	} {
		if got, want := describe(dsn), `db.example:5432 (database "parley", user "alice")`; got != want {
			t.Errorf("describe(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	cases := []struct{ admin, want string }{
		{"postgres://u:p%40ss@h:5432/postgres?sslmode=disable", "postgres://u:p%40ss@h:5432/parley_x?sslmode=disable"},
		{"postgresql://h/postgres", "postgresql://h/parley_x"},
		{"host=h user=u dbname=postgres sslmode=disable", "host=h user=u dbname=postgres sslmode=disable dbname=parley_x"},
	}
	for _, tc := range cases {
		got, err := withDatabase(tc.admin, "parley_x")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.admin, got, err, tc.want)
			continue
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil || cfg.Database != "parley_x" {
			t.Errorf("withDatabase(%q) = %q, which connects to %q (%v)", tc.admin, got, cfg.Database, err)
		}
	}
	if _, err := withDatabase("host='unterminated", "x"); err == nil {
		t.Error("withDatabase accepted an unparseable connection string")
	}
}

// TestNewURLKeywordValue runs NewURL with a keyword/value TEST_DATABASE_URL, the other form
// libpq users write.
func TestNewURLKeywordValue(t *testing.T) {
	cfg, err := pgconn.ParseConfig(AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, cfg.Database)
	if cfg.Password != "" {
		kv += " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(cfg.Password) + "'"
	}
	t.Setenv("TEST_DATABASE_URL", kv)
	dsn := NewURL(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db); err != nil || !strings.HasPrefix(db, "parley_test_") {
		t.Fatalf("connected to %q (%v), want a parley_test_ database", db, err)
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

// newURLFailure runs NewURL against admin and returns its failure message.
func newURLFailure(t *testing.T, admin string) string {
	t.Setenv("TEST_DATABASE_URL", admin)
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		NewURL(rec)
	}()
	<-done
	if strings.Contains(rec.msg, "hunter2") {
		t.Fatalf("failure message leaks the password: %q", rec.msg)
	}
	return rec.msg
}

func TestNewURLFailsWhenServerAbsent(t *testing.T) {
	msg := newURLFailure(t, "postgres://postgres:hunter2@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	if !strings.Contains(msg, "does not answer at 127.0.0.1:1") {
		t.Fatalf("want a failure naming the server, got %q", msg)
	}
}

// TestNewURLFailsWhenLoginRefused is the fresh machine whose server wants another user or a
// password: the message says so and how to fix it, rather than "does not answer".
func TestNewURLFailsWhenLoginRefused(t *testing.T) {
	cfg, err := pgconn.ParseConfig(AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	refused := fmt.Sprintf("postgres://parley_no_such_role:hunter2@%s:%d/postgres?sslmode=disable", cfg.Host, cfg.Port)
	msg := newURLFailure(t, refused)
	for _, want := range []string{"refused the login", "SQLSTATE 28", "TEST_DATABASE_URL", `user "parley_no_such_role"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q does not contain %q", msg, want)
		}
	}
}

// TestTemplateCopies: the template is prepared once, each NewURL is a copy of its own (what
// one test writes the next does not see), and Drop removes the template.
func TestTemplateCopies(t *testing.T) {
	ctx := context.Background()
	prepared := 0
	tp := NewTemplate(func(ctx context.Context, dsn string) error {
		prepared++
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE seed (n int); INSERT INTO seed VALUES (1)`)
		return err
	})
	count := func(dsn string) int {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM seed`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO seed VALUES (2)`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := tp.NewURL(t), tp.NewURL(t)
	if a == b || count(a) != 1 || count(b) != 1 || prepared != 1 {
		t.Fatalf("copies %s and %s, prepared %d times: want two databases each with the seed row, one preparation", a, b, prepared)
	}
	name := tp.name
	if err := tp.Drop(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil || exists {
		t.Fatalf("template %s exists after Drop (%v)", name, err)
	}
}
