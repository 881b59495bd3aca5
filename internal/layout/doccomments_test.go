package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// docNamesIt: a doc comment begins with the name it documents ("A", "An" or
// "The" may come first; punctuation or "'s" may follow the name), so that a
// renamed identifier cannot keep a comment about its old name.
func docNamesIt(doc string, names ...string) bool {
	words := strings.Fields(doc)
	if len(words) == 0 {
		return true
	}
	first := words[0]
	if (first == "A" || first == "An" || first == "The") && len(words) > 1 {
		first = words[1]
	}
	first = strings.TrimSuffix(strings.TrimRight(first, ",:.;"), "'s")
	for _, n := range names {
		if first == n {
			return true
		}
	}
	return false
}

// misnamedDocs lists, for one file, each top-level declaration whose doc
// comment does not begin with its name: functions, methods, and types,
// constants and variables declared alone (a comment in a group of them may
// head the group's part).
func misnamedDocs(f *ast.File) (bad []string) {
	check := func(doc *ast.CommentGroup, names ...string) {
		if doc != nil && !docNamesIt(doc.Text(), names...) {
			bad = append(bad, names[0]+": "+strings.SplitN(doc.Text(), "\n", 2)[0])
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			check(d.Doc, d.Name.Name)
		case *ast.GenDecl:
			if d.Tok == token.IMPORT || d.Lparen.IsValid() {
				continue
			}
			switch s := d.Specs[0].(type) {
			case *ast.TypeSpec:
				check(d.Doc, s.Name.Name)
			case *ast.ValueSpec:
				var names []string
				for _, n := range s.Names {
					names = append(names, n.Name)
				}
				check(d.Doc, names...)
			}
		}
	}
	return bad
}

// TestDocCommentsNameTheirIdentifier: every doc comment of a top-level
// declaration in the module's non-test files begins with the declared name.
func TestDocCommentsNameTheirIdentifier(t *testing.T) {
	for _, p := range list(t, "./...") {
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range misnamedDocs(f) {
				t.Errorf("%s/%s: the doc comment of %s", rel(p.ImportPath), name, b)
			}
		}
	}
}

// TestMisnamedDocs: the check catches a comment left on a renamed
// identifier, and lets through the forms Go's doc comments take.
func TestMisnamedDocs(t *testing.T) {
	src := `package p

// oldName is stale.
func NewName() {}

// A Thing is fine.
type Thing struct{}

// limit: a colon after the name is fine.
const limit = 1

// Store's methods are fine too.
type Store struct{}

// stale comment of an exported constant.
const Exported = 2

const (
	// A group's comments head its parts.
	a = 1
)
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	got := misnamedDocs(f)
	want := []string{"NewName: oldName is stale.", "Exported: stale comment of an exported constant."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("misnamedDocs = %q, want %q", got, want)
	}
}
