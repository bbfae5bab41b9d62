package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"parley/internal/store/pgtest"
	"parley/migrations"
)

// TestSchemasAreFresh: the committed migrations/*/schema.sql are what the migrations make
// (`make generate-check` checks the same through git).
func TestSchemasAreFresh(t *testing.T) {
	schemas, err := generate(t.Context(), pgtest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range migrations.Dialects {
		path := filepath.Join("..", "..", string(d), "schema.sql")
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(committed) != schemas[d] {
			t.Errorf("migrations/%s/schema.sql is stale: run `make generate` (go run ./migrations/cmd/schemadump) and commit it\n%s",
				d, firstDifference(string(committed), schemas[d]))
		}
	}
}

// firstDifference shows the first line where the committed text and the generated one part.
func firstDifference(committed, generated string) string {
	a, b := strings.Split(committed, "\n"), strings.Split(generated, "\n")
	for i := range max(len(a), len(b)) {
		var la, lb string
		if i < len(a) {
			la = a[i]
		}
		if i < len(b) {
			lb = b[i]
		}
		if la != lb || i >= len(a) || i >= len(b) {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, la, lb)
		}
	}
	return ""
}

func TestWithDatabase(t *testing.T) {
	for admin, want := range map[string]string{
		"postgres://u:p@h:5432/postgres?sslmode=disable": "postgres://u:p@h:5432/other?sslmode=disable",
		"host=h user=u dbname=postgres":                  "host=h user=u dbname=postgres dbname=other",
	} {
		if got, err := withDatabase(admin, "other"); err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", admin, got, err, want)
		}
	}
}
