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
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server tests use when TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// connectTimeout bounds how long a test waits for an absent server before failing.
const connectTimeout = 5 * time.Second

// AdminURL returns TEST_DATABASE_URL or DefaultURL: the database tests connect to in order to
// create and drop their own.
func AdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// NewURL creates an empty database with a random name, returns a URL for it (the admin URL with
// the database name replaced) and drops it WITH (FORCE) when the test ends. It fails the test with
// a message naming the server when PostgreSQL does not answer.
func NewURL(t testing.TB) string {
	t.Helper()
	admin := AdminURL()
	name := "parley_test_" + randomHex(8)
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: TEST_DATABASE_URL is not a URL: %v", err)
	}
	u.Path = "/" + name

	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: PostgreSQL does not answer at %s (set TEST_DATABASE_URL or run scripts/ensure-postgres.sh): %v",
			redacted(u), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { drop(t, admin, name) })
	return u.String()
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

// redacted prints u without its password, for messages.
func redacted(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(c.User.Username())
	}
	return fmt.Sprintf("%s (database %q)", c.Host, c.Path)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}
