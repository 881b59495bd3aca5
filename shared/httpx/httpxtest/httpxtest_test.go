package httpxtest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTestsImport: httpxtest asserts with testify and keeps package-level
// clients, so no package's non-test code may import it.
func TestOnlyTestsImport(t *testing.T) {
	const self = "github.com/flashgate/flashgate/shared/httpx/httpxtest"
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/flashgate/flashgate/...").Output()
	if err != nil {
		t.Fatalf("go list = %v", err)
	}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), ": ")
		for _, imp := range strings.Fields(imports) {
			if imp == self {
				t.Errorf("%s imports %s outside its tests", pkg, self)
			}
		}
	}
}
