package app

import (
	"bytes"
	"context"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository, two levels up from this package.
const repoRoot = "../.."

// docSection is the text of the section of a Markdown file that starts with heading (up to the
// next heading of the same or a higher level).
func docSection(t *testing.T, file, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q section", file, heading)
	}
	rest := doc[i+len(heading)+2:]
	level := strings.Repeat("#", strings.Count(strings.Fields(heading)[0], "#"))
	if j := regexp.MustCompile(`(?m)^#{1,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}

// tableRows are the rows of the Markdown tables in text whose first cell is one code span:
// that span and the row's other cells.
func tableRows(text string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		first := cells[0]
		if !strings.HasPrefix(first, "`") || !strings.HasSuffix(first, "`") || strings.Count(first, "`") != 2 {
			continue
		}
		rows[strings.Trim(first, "`")] = cells[1:]
	}
	return rows
}

// TestConfigurationDoc: docs/configuration.md's table of variables is exactly Variables, each
// with a default and a meaning; every variable-like string in the code of the binary is one of
// them (a variable read without being listed and documented fails here); the commands table
// names every command of the usage text and every flag they take; the usage text points to the
// page.
func TestConfigurationDoc(t *testing.T) {
	rows := tableRows(docSection(t, "docs/configuration.md", "## Environment"))
	for _, v := range Variables {
		cells, ok := rows[v]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md has no row for %s", v)
		case len(cells) != 2 || strings.TrimSpace(cells[0]) == "" || len(strings.TrimSpace(cells[1])) < 10:
			t.Errorf("docs/configuration.md's row for %s needs a default and a meaning: %q", v, cells)
		}
	}
	for name := range rows {
		if !slices.Contains(Variables, name) {
			t.Errorf("docs/configuration.md documents %s, which the configuration does not read (Variables)", name)
		}
	}
	for _, lit := range envLiterals(t) {
		if !slices.Contains(Variables, lit.name) {
			t.Errorf("%s reads %s, which is not in Variables (and so not in docs/configuration.md)", lit.at, lit.name)
		}
	}
	if !strings.Contains(usage, "docs/configuration.md") {
		t.Error("the usage text does not point to docs/configuration.md")
	}

	commands := docSection(t, "docs/configuration.md", "## Commands")
	for _, cmd := range usageCommands() {
		if !strings.Contains(commands, "`web "+cmd) {
			t.Errorf("docs/configuration.md's commands table lacks web %s", cmd)
		}
		for _, f := range commandFlags(t, cmd) {
			if !strings.Contains(commands, "--"+f) {
				t.Errorf("docs/configuration.md's commands table lacks --%s of web %s", f, cmd)
			}
		}
	}
}

// TestListedRefusesUnlisted: reading a variable that Variables does not list is a programming
// error caught at once.
func TestListedRefusesUnlisted(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("an unlisted variable was read")
		}
	}()
	listed(func(string) string { return "" })("PARLEY_NOT_A_SETTING")
}

// usageCommands are the commands of the usage text: "serve", "user add", …
func usageCommands() []string {
	var out []string
	for _, line := range strings.Split(usage, "\n") {
		rest, ok := strings.CutPrefix(line, "  web ")
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, "  ") // the description follows a run of spaces
		var words []string
		for _, w := range strings.Fields(rest) {
			if !regexp.MustCompile(`^[a-z]+$`).MatchString(w) {
				break
			}
			words = append(words, w)
		}
		if len(words) > 0 {
			out = append(out, strings.Join(words, " "))
		}
	}
	return out
}

// commandFlags are the flags cmd defines, as its -h prints them.
func commandFlags(t *testing.T, cmd string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append(strings.Fields(cmd), "-h")
	getenv := func(k string) string {
		if k == "PARLEY_DATA_DIR" {
			return t.TempDir()
		}
		return ""
	}
	_ = run(context.Background(), args, getenv, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr})
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(stderr.String(), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// envLiteral is a string literal that names an environment variable, and where it is.
type envLiteral struct{ name, at string }

// envLiterals are the string literals shaped like an environment variable (FOO_BAR) in the
// non-test Go files of the binary's packages (cmd/web and every package of this module it
// imports, files of other build tags included).
func envLiterals(t *testing.T) []envLiteral {
	t.Helper()
	shape := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	var out []envLiteral
	seen := map[string]bool{}
	var visit func(path string)
	visit = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.Default.ImportDir(filepath.Join(root, strings.TrimPrefix(path, "parley")), 0)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		files := append(append([]string(nil), pkg.GoFiles...), pkg.IgnoredGoFiles...)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(lit.Value); err == nil && shape.MatchString(s) {
					out = append(out, envLiteral{name: s, at: fset.Position(lit.Pos()).String()})
				}
				return true
			})
		}
		for _, imp := range pkg.Imports {
			if imp == "parley" || strings.HasPrefix(imp, "parley/") {
				visit(imp)
			}
		}
	}
	visit("parley/cmd/web")
	if len(seen) < 10 {
		t.Fatalf("walked only %d packages from cmd/web", len(seen))
	}
	return out
}

// repoFiles calls fn with every text file of the repository (its path relative to the root,
// with slashes, and its content), leaving out git's own files and what builds and runs leave
// behind.
func repoFiles(t *testing.T, fn func(rel string, data []byte)) {
	t.Helper()
	skipDirs := map[string]bool{".git": true, "data": true, "bin": true, "test-artifacts": true, "node_modules": true}
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != repoRoot && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == ".git" || !d.Type().IsRegular() {
			return nil // a worktree's .git file names where git keeps it: not the project's
		}
		info, err := d.Info()
		if err != nil || info.Size() > 4<<20 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			return nil // binary
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoOutsideReferences: nothing in the repository — docs, code, comments, scripts — points
// to files outside it (the workspace around a checkout, its shared documents, absolute paths of
// one machine), and every docs/*.md named anywhere exists. (The patterns are built so that this
// file does not match them itself.)
func TestNoOutsideReferences(t *testing.T) {
	outside := []*regexp.Regexp{
		regexp.MustCompile(`\.\./` + `shared`),
		regexp.MustCompile(`(^|[^A-Za-z0-9._-])/` + `work/`),
		regexp.MustCompile(`\b(API|DESIGN|STYLE|MACHINE)\.md\b`),
		regexp.MustCompile(`\bseeds?/|\bseed \d{3}\b`),
	}
	docRef := regexp.MustCompile(`\bdocs/[A-Za-z0-9_.-]+\.md\b`)
	files := 0
	repoFiles(t, func(rel string, data []byte) {
		files++
		for i, line := range strings.Split(string(data), "\n") {
			for _, re := range outside {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d points outside the repository (%q): %s", rel, i+1, m, strings.TrimSpace(line))
				}
			}
			for _, m := range docRef.FindAllString(line, -1) {
				if _, err := os.Stat(filepath.Join(repoRoot, m)); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", rel, i+1, m)
				}
			}
		}
	})
	if files < 100 {
		t.Fatalf("read only %d files of the repository", files)
	}
}

// TestDocLinks: every relative link of every Markdown file leads to a file of the repository,
// and every #anchor to a heading of the page it names.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	pages := map[string]string{} // path → text without code
	repoFiles(t, func(rel string, data []byte) {
		if strings.HasSuffix(rel, ".md") {
			pages[rel] = withoutCode(string(data))
		}
	})
	if _, ok := pages["docs/api.md"]; !ok {
		t.Fatal("docs/api.md not found")
	}
	anchors := map[string]map[string]bool{}
	for rel, text := range pages {
		anchors[rel] = headingAnchors(text)
	}
	for rel, text := range pages {
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := rel
			if file != "" {
				if strings.HasPrefix(file, "/") {
					t.Errorf("%s: link %s is absolute; link relative to the page", rel, target)
					continue
				}
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), file)))
				if strings.HasPrefix(dest, "../") || dest == ".." {
					t.Errorf("%s: link %s leads outside the repository", rel, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: link %s leads to nothing", rel, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if a, ok := anchors[dest]; !ok {
				t.Errorf("%s: link %s has an anchor into a file that is not Markdown", rel, target)
			} else if !a[anchor] {
				t.Errorf("%s: link %s names no heading of %s", rel, target, dest)
			}
		}
	}
}

// withoutCode is Markdown text without its fenced blocks and code spans, where brackets and
// hashes are not links or headings.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if fenced {
			b.WriteString("\n")
			continue
		}
		b.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "code"))
		b.WriteString("\n")
	}
	return b.String()
}

// headingAnchors are the anchors GitHub gives the headings of text: lower case, punctuation
// but hyphens and underscores dropped, spaces as hyphens, "-1", "-2" … after repeats.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	heading := regexp.MustCompile(`^#{1,6} +(.+?) *#*$`)
	for _, line := range strings.Split(text, "\n") {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
