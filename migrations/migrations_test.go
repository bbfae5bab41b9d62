package migrations

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestParse(t *testing.T) {
	ok := fstest.MapFS{
		"002_more.up.sql": {Data: []byte("SELECT 2")},
		"001_init.up.sql": {Data: []byte("SELECT 1")},
		"README.md":       {Data: []byte("ignored")},
		"schema.sql":      {Data: []byte("ignored")},
	}
	ms, err := Parse(ok)
	if err != nil || len(ms) != 2 || ms[0].Version != 1 || ms[1].Version != 2 || ms[1].SQL != "SELECT 2" || ms[1].Name != "002_more.up.sql" {
		t.Fatalf("Parse = %+v, %v", ms, err)
	}
	for name, bad := range map[string]fstest.MapFS{
		"no number":      {"init.up.sql": {}},
		"zero":           {"000_init.up.sql": {}},
		"shared version": {"001_a.up.sql": {}, "1_b.up.sql": {}},
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%s: Parse accepted %v", name, bad)
		}
	}
	if _, err := Load("mysql"); err == nil {
		t.Error("Load of an unknown dialect succeeded")
	}
}

// TestOneNumberedLine: both folders hold the same numbers, 1 to the newest without a gap, under
// the same names — a change is one number in both, with a file that only says why where a
// dialect has nothing to do.
func TestOneNumberedLine(t *testing.T) {
	byDialect := map[Dialect][]Migration{}
	for _, d := range Dialects {
		ms, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range ms {
			if m.Version != i+1 {
				t.Errorf("%s: %s where %03d is expected: numbers run from 001 without a gap", d, m.Name, i+1)
			}
		}
		byDialect[d] = ms
	}
	pg, lite := byDialect[Postgres], byDialect[SQLite]
	for i := range max(len(pg), len(lite)) {
		switch {
		case i >= len(pg):
			t.Errorf("sqlite/%s has no postgres/ twin", lite[i].Name)
		case i >= len(lite):
			t.Errorf("postgres/%s has no sqlite/ twin", pg[i].Name)
		case pg[i].Name != lite[i].Name:
			t.Errorf("postgres/%s and sqlite/%s: one number, one name", pg[i].Name, lite[i].Name)
		}
	}
}

// TestNoMigrationOutsideTheDialectFolders: a NNN_name.up.sql left at the top of migrations/ (the
// layout before the dialect folders) would be embedded by nobody and never applied.
func TestNoMigrationOutsideTheDialectFolders(t *testing.T) {
	stray, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(Dialects, Dialect(e.Name())) && e.Name() != "cmd" && e.Name() != "schemadump" {
			sqls, _ := filepath.Glob(filepath.Join(e.Name(), "*.sql"))
			stray = append(stray, sqls...)
		}
	}
	if len(stray) > 0 {
		t.Fatalf("SQL files outside migrations/postgres and migrations/sqlite, which no store applies: %s\n"+
			"move each into both folders under one number (see migrations/README.md)", strings.Join(stray, ", "))
	}
}
