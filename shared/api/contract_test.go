package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneWireContract keeps the bodies in this package: the Go client
// declares no type with JSON fields of its own (it decodes into shared/api's),
// and no handler of the ledger or the proxy answers a gin.H map, whose fields
// no type or schema names.
func TestOneWireContract(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../client", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		ast.Inspect(pkg, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			if st, ok := spec.Type.(*ast.StructType); ok {
				for _, f := range st.Fields.List {
					if f.Tag != nil && strings.Contains(f.Tag.Value, `json:"`) {
						t.Errorf("%s: shared/client declares the wire type %s: use shared/api's", fset.Position(spec.Pos()), spec.Name)
						break
					}
				}
			}
			return true
		})
	}
	for _, dir := range []string{"../../ledger", "../../proxy"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(src), "\n") {
				if strings.Contains(line, "gin.H{") {
					t.Errorf("%s:%d: a gin.H answer: answer a shared/api type", path, i+1)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
