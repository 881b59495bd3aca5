package docs

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// specFile finds the OpenAPI description of both services under shared/,
// wherever the wire contract keeps it.
func specFile(t *testing.T) string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(filepath.Join(root, "shared"), func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case !d.IsDir() && d.Name() == "openapi.yaml":
			found = append(found, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, found, 1, "one openapi.yaml under shared/")
	return found[0]
}

// documentedRoute is how docs/api.md names a route: "`METHOD /path" followed
// by a query, a space, a comma or the closing backtick.
var documentedRoute = regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/[^`?\\s,]*)")

// TestRoutesDocumented: every operation of the OpenAPI description (a path
// and a method) is named in docs/api.md, and every route docs/api.md names is
// in the description.
func TestRoutesDocumented(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile(specFile(t))
	require.NoError(t, err)
	spec := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			spec[method+" "+path] = true
		}
	}
	require.NotEmpty(t, spec)

	const rel = "docs/api.md"
	documented := map[string]bool{}
	for _, m := range documentedRoute.FindAllStringSubmatch(read(t, rel), -1) {
		documented[m[1]+" "+m[2]] = true
	}
	for _, route := range sortedKeys(spec) {
		if !documented[route] {
			t.Errorf("%s is in the OpenAPI description but not in %s", route, rel)
		}
	}
	for _, route := range sortedKeys(documented) {
		if !spec[route] {
			t.Errorf("%s names %s, which the OpenAPI description does not have", rel, route)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
