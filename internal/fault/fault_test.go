package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestKindsListsEveryConstant: every Kind constant declared in fault.go is in Kinds, once.
func TestKindsListsEveryConstant(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "fault.go", nil, 0)
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

// TestErrorKindsDoc: the error kinds table of docs/api.md documents exactly the kinds of Kinds.
func TestErrorKindsDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n### Error kinds\n")
	if start < 0 {
		t.Fatal(`docs/api.md has no "### Error kinds" section`)
	}
	doc = doc[start+1:]
	if end := regexp.MustCompile(`(?m)^#{1,3} `).FindAllStringIndex(doc, 2); len(end) == 2 {
		doc = doc[:end[1][0]]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (.+) \\|$")
	documented := map[Kind]bool{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
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
		t.Errorf("docs/api.md's error kinds lack a row for %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("docs/api.md's error kinds document kinds not in Kinds: %v", extra)
	}
}

// TestMapShowsProblems: typed problems reach details.problems beside the other details, as the
// API's error envelope and a tool's result envelope show them.
func TestMapShowsProblems(t *testing.T) {
	e := Invalid("bad", Problem{Path: "/to", Message: "not an email"})
	e.Details = map[string]any{"tool": "send_email"}
	b, err := json.Marshal(e.Map())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"details":{"problems":[{"path":"/to","message":"not an email"}],"tool":"send_email"},"kind":"invalid_args","message":"bad"}`
	if string(b) != want {
		t.Errorf("Map = %s\nwant  %s", b, want)
	}
	if got := New(KindStale, "x", nil).Map()["details"]; got == nil {
		t.Error("details must never be nil")
	}
	if KindOf(fmt.Errorf("wrapped: %w", e)) != KindInvalidArgs || KindOf(errors.New("plain")) != "" {
		t.Error("KindOf does not follow the chain")
	}
}

// TestInternalLogsOnlyTheReference: the cause goes to the log under the reference; the error
// carries the reference and nothing of the cause.
func TestInternalLogsOnlyTheReference(t *testing.T) {
	var buf bytes.Buffer
	e := Internal(slog.New(slog.NewTextHandler(&buf, nil)), "load thing", errors.New("secret dsn"))
	ref, _ := e.Details["ref"].(string)
	if e.Kind != KindInternal || ref == "" || strings.Contains(e.Message, "secret") || !strings.Contains(e.Message, ref) {
		t.Fatalf("Internal = %+v", e)
	}
	if log := buf.String(); !strings.Contains(log, ref) || !strings.Contains(log, "secret dsn") {
		t.Errorf("the log lacks the reference or the cause: %s", log)
	}
}

// TestUnavailable: what a dependency that does not answer looks like, and what it does not.
func TestUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"refused":            {fmt.Errorf("load: %w", refused), true},
		"reset":              {fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		"deadline":           {fmt.Errorf("acquire: %w", context.DeadlineExceeded), true},
		"cut mid-answer":     {fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		"admin shutdown":     {sqlState("57P01"), true},
		"connection failure": {sqlState("08006"), true},
		"too many conns":     {sqlState("53300"), true},
		"unique violation":   {sqlState("23505"), false},
		"behind Internal":    {Internal(slog.New(slog.NewTextHandler(io.Discard, nil)), "x", refused), true},
		"plain":              {errors.New("disk on fire"), false},
		"canceled":           {context.Canceled, false},
		"nil":                {nil, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("%s: Unavailable = %v, want %v", name, got, tc.want)
		}
	}
}

type sqlState string

func (s sqlState) Error() string    { return "SQLSTATE " + string(s) }
func (s sqlState) SQLState() string { return string(s) }
