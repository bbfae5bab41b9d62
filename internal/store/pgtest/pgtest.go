// Package pgtest gives tests an isolated, empty PostgreSQL database on the server named by
// TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).
//
// A test that needs PostgreSQL fails — never skips — when the server does not answer: a missing
// database must be visible in the run, not silently turned into a pass.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultURL is the server tests use when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// connectTimeout bounds how long a test waits for an absent server before failing.
const connectTimeout = 5 * time.Second

// createTimeout bounds one CREATE DATABASE (a copy of the package's migrated template).
const createTimeout = time.Minute

// AdminURL returns TEST_DATABASE_URL or DefaultURL: the database tests connect to in order to
// create and drop their own.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// NewURL creates an empty database with a random name, returns a connection string for it (the
// admin one with the database replaced; a URL or a keyword/value string like the admin one) and
// drops it WITH (FORCE) when the test ends. It fails the test with a message naming the server
// and saying what to do when PostgreSQL does not answer or refuses the user.
func NewURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, AdminURL(), "CREATE DATABASE %s")
}

// newDatabase runs create (a CREATE DATABASE statement with %s for the name) for a database
// with a random name, and drops that database when the test ends.
func newDatabase(t testing.TB, admin, create string) string {
	t.Helper()
	name := "parley_test_" + randomHex(8)
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: TEST_DATABASE_URL: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: %s", connectFailure(admin, err))
	}
	defer conn.Close(context.Background())
	// Creating a database copies its template and waits for other copies of it: on a loaded
	// machine that takes longer than finding the server, so it has a deadline of its own.
	cctx, ccancel := context.WithTimeout(context.Background(), createTimeout)
	defer ccancel()
	if _, err := conn.Exec(cctx, fmt.Sprintf(create, pgx.Identifier{name}.Sanitize())); err != nil {
		hint := ""
		if pgCode(err) == "42501" { // insufficient_privilege
			hint = " (the TEST_DATABASE_URL user needs CREATEDB: ALTER ROLE … CREATEDB)"
		}
		t.Fatalf("pgtest: create database %s on %s: %v%s", name, describe(admin), err, hint)
	}
	t.Cleanup(func() { drop(t, admin, name) })
	return dsn
}

// Template is a database that tests copy (CREATE DATABASE … TEMPLATE) rather than each
// building the same schema: prepare makes it once per test binary, on first use, typically by
// applying the migrations. A copy is the database prepare left, so a package whose tests each
// need a migrated store pays for the migrations once instead of once a test. The package's
// TestMain drops it with Drop after the tests.
type Template struct {
	prepare func(ctx context.Context, dsn string) error

	once sync.Once
	name string // set by once
	err  error  // set by once
}

// NewTemplate returns a template prepare makes on first use, with a connection string for it;
// prepare must close every connection it opened (a template with a session cannot be copied).
func NewTemplate(prepare func(ctx context.Context, dsn string) error) *Template {
	return &Template{prepare: prepare}
}

// NewURL is NewURL with the database a copy of the template, made first if need be.
func (tp *Template) NewURL(t testing.TB) string {
	t.Helper()
	admin := AdminURL()
	tp.once.Do(func() {
		name := "parley_template_" + randomHex(8)
		dsn, err := withDatabase(admin, name)
		if err != nil {
			tp.err = fmt.Errorf("TEST_DATABASE_URL: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := exec(ctx, admin, "create the template database "+name, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			tp.err = err
			return
		}
		tp.name = name
		if err := tp.prepare(ctx, dsn); err != nil {
			tp.err = fmt.Errorf("prepare the template database %s: %w", name, err)
		}
	})
	if tp.err != nil {
		t.Fatalf("pgtest: %v", tp.err)
	}
	return newDatabase(t, admin, "CREATE DATABASE %s TEMPLATE "+pgx.Identifier{tp.name}.Sanitize())
}

// Drop drops the template database, when one was made.
func (tp *Template) Drop() error {
	if tp.name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec(ctx, AdminURL(), "drop the template database "+tp.name, "DROP DATABASE IF EXISTS "+pgx.Identifier{tp.name}.Sanitize()+" WITH (FORCE)")
}

// exec runs one statement on a connection of its own to dsn; its errors say what failed (what)
// and name the server, never the password.
func exec(ctx context.Context, dsn, what, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return errors.New(connectFailure(dsn, err))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s on %s: %w", what, describe(dsn), err)
	}
	return nil
}

// withDatabase returns the connection string admin with its database replaced by name. A
// keyword/value string gets a second dbname, which wins (libpq's and pgx's rule).
func withDatabase(admin, name string) (string, error) {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		u, err := url.Parse(admin)
		if err != nil {
			return "", fmt.Errorf("not a URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	if _, err := pgconn.ParseConfig(admin); err != nil {
		return "", errors.New("not a postgres:// URL or a keyword/value connection string")
	}
	return admin + " dbname=" + name, nil
}

// connectFailure says why the admin connection failed and what to do, without the password.
func connectFailure(admin string, err error) string {
	where := describe(admin)
	if code := pgCode(err); strings.HasPrefix(code, "28") { // invalid authorization: password, pg_hba, role
		return fmt.Sprintf("PostgreSQL at %s refused the login (SQLSTATE %s: %s): put the password in TEST_DATABASE_URL "+
			"(postgres://user:password@host:port/db) or PGPASSWORD, or run scripts/ensure-postgres.sh as root to trust 127.0.0.1",
			where, code, pgMessage(err))
	}
	return fmt.Sprintf("PostgreSQL does not answer at %s (set TEST_DATABASE_URL or run scripts/ensure-postgres.sh): %v", where, err)
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func pgMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

func drop(t testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("pgtest: drop database %s: connect: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("pgtest: drop database %s: %v", name, err)
	}
}

// describe names the server, database and user of a connection string for messages, never
// its password.
func describe(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "(unparseable TEST_DATABASE_URL)"
	}
	return fmt.Sprintf("%s:%d (database %q, user %q)", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}
