package tools

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"
)

// TestKindsListsEveryConstant: every Kind constant declared in errors.go is in Kinds, once.
func TestKindsListsEveryConstant(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[Kind]string{}
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
				continue
			}
			for i, name := range vs.Names {
				lit := vs.Values[i].(*ast.BasicLit)
				v, _ := strconv.Unquote(lit.Value)
				declared[Kind(v)] = name.Name
			}
		}
	}
	listed := map[Kind]bool{}
	for _, k := range Kinds {
		if listed[k] {
			t.Errorf("%q is listed twice in Kinds", k)
		}
		listed[k] = true
		if _, ok := declared[k]; !ok {
			t.Errorf("%q is in Kinds but not declared as a constant", k)
		}
	}
	for k, name := range declared {
		if !listed[k] {
			t.Errorf("%s (%q) is missing from Kinds", name, k)
		}
	}
	if len(declared) < 30 {
		t.Errorf("parsed only %d kinds; the parser missed the declarations", len(declared))
	}
}

// TestErrorKindsDoc: docs/error-kinds.md documents exactly the kinds of Kinds.
func TestErrorKindsDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/error-kinds.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (.+) \\|$")
	documented := map[Kind]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[Kind(m[1])] = true
		if len(m[2]) < 10 {
			t.Errorf("kind %s has no real description", m[1])
		}
	}
	var missing, extra []string
	listed := map[Kind]bool{}
	for _, k := range Kinds {
		listed[k] = true
		if !documented[k] {
			missing = append(missing, string(k))
		}
	}
	for k := range documented {
		if !listed[k] {
			extra = append(extra, string(k))
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("docs/error-kinds.md lacks a row for %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("docs/error-kinds.md documents kinds not in tools.Kinds: %v", extra)
	}
}
