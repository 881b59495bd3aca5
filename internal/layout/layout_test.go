package layout

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/flashgate/flashgate/"

// layers lists, for each service with internal packages (and for httpx and its
// parts), its packages from the bottom up: a package may import only the
// packages before it in its list.
// A new package gets a place here (the test fails until it has one).
var layers = map[string][]string{
	"ledger/internal/":   {"store", "sale", "admissions", "jobs", "outbox", "web", "app", "ledgertest"},
	"loadtest/internal/": {"stack", "load", "verify", "burst", "compare", "chaos", "attack"},
	"proxy/internal/":    {"ledger", "codes", "limits", "admit", "edge"},
	// httpx ("") is the plumbing below its parts; service assembles them.
	"shared/httpx": {"", "/decode", "/auth", "/overload", "/service"},
}

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath  string
	Dir         string
	GoFiles     []string
	TestGoFiles []string
	Imports     []string
	Deps        []string
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rel is a package's path inside the module ("ledger/internal/store").
func rel(path string) string { return strings.TrimPrefix(path, module) }

// TestImportsRunDown: inside ledger/, loadtest/ and proxy/, every package under
// internal/ imports only the packages below it in layers; main sits on top.
func TestImportsRunDown(t *testing.T) {
	for _, p := range list(t, "./...") {
		name := rel(p.ImportPath)
		for prefix, order := range layers {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			at := slices.Index(order, strings.TrimPrefix(name, prefix))
			if at < 0 {
				t.Errorf("%s has no place in layers[%q]: give it one", name, prefix)
				continue
			}
			for _, imp := range p.Imports {
				sub, ok := strings.CutPrefix(rel(imp), prefix)
				if !ok || rel(imp) == imp {
					continue
				}
				if j := slices.Index(order, sub); j < 0 || j >= at {
					t.Errorf("%s imports %s, which is not below it (layers[%q] = %v)", name, rel(imp), prefix, order)
				}
			}
		}
	}
}

// TestWireContractWithoutGin: the wire contract and the Go client build
// without any HTTP framework, so any program can import them.
func TestWireContractWithoutGin(t *testing.T) {
	for _, p := range list(t, "-deps=false", "./shared/api", "./shared/client", "./shared/voucher") {
		deps := list(t, "-deps", p.ImportPath)
		for _, d := range deps {
			if strings.HasPrefix(d.ImportPath, "github.com/gin-gonic/") {
				t.Errorf("%s depends on %s", rel(p.ImportPath), d.ImportPath)
			}
		}
	}
}

// sqlText matches a string literal that is a SQL statement.
var sqlText = regexp.MustCompile(`(?is)^\s*(select\s|insert\s+into\s|update\s+\S+\s+set\s|delete\s+from\s|with\s+\S+\s+as\s*\(|set\s+(local\s+)?\S+\s*(=|to)\s)|pg_advisory|pg_try_advisory`)

// sqlAllowed are the ledger's packages that may speak SQL: the store, and the
// test kit, which reads the books straight from the database to check what
// the store wrote (a test that asked the store would check it against itself).
var sqlAllowed = []string{"ledger/internal/store", "ledger/internal/ledgertest"}

// TestSQLOnlyInTheStore: in the ledger, only the store speaks SQL: no other
// package imports the driver or holds a statement's text.
func TestSQLOnlyInTheStore(t *testing.T) {
	for _, p := range list(t, "./ledger/...") {
		if slices.Contains(sqlAllowed, rel(p.ImportPath)) {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "github.com/jackc/") {
				t.Errorf("%s imports %s: SQL belongs to ledger/internal/store", rel(p.ImportPath), imp)
			}
		}
		for _, f := range p.GoFiles {
			for _, lit := range stringLiterals(t, filepath.Join(p.Dir, f)) {
				if sqlText.MatchString(lit) {
					t.Errorf("%s/%s holds SQL %q: it belongs to ledger/internal/store", rel(p.ImportPath), f, firstLine(lit))
				}
			}
		}
	}
}

func stringLiterals(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// Sizes a reader can hold in mind: files up to maxFileLines, functions (tests
// aside) up to maxFuncLines.
const (
	maxFileLines = 600
	maxFuncLines = 80
)

// tables are functions that are one table of cases, exempt from maxFuncLines.
var tables = []string{
	"shared/testkit/httpxtest.PublicHostileCases",
}

// TestSizes: no Go file over maxFileLines, no non-test function over
// maxFuncLines (tables of cases aside).
func TestSizes(t *testing.T) {
	for _, p := range list(t, "./...") {
		files := append(slices.Clone(p.GoFiles), p.TestGoFiles...)
		for _, name := range files {
			fset := token.NewFileSet()
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
				t.Errorf("%s/%s has %d lines (at most %d)", rel(p.ImportPath), name, n, maxFileLines)
			}
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil || slices.Contains(tables, rel(p.ImportPath)+"."+fd.Name.Name) {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s/%s: %s has %d lines (at most %d)", rel(p.ImportPath), name, fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}
