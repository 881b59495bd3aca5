package httpxtest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestOnlyTestsImport: httpxtest asserts with testify and keeps package-level
// clients, so no package's non-test code may import it, the ledger's test kit
// (itself imported only by tests) aside.
func TestOnlyTestsImport(t *testing.T) {
	const self = "github.com/flashgate/flashgate/shared/testkit/httpxtest"
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}: {{join .Imports " "}}`, "github.com/flashgate/flashgate/...").Output()
	if err != nil {
		t.Fatalf("go list = %v", err)
	}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), ": ")
		if pkg == "github.com/flashgate/flashgate/ledger/internal/ledgertest" {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == self {
				t.Errorf("%s imports %s outside its tests", pkg, self)
			}
		}
	}
}

// errorsTB records what a check reports instead of failing the test.
type errorsTB struct {
	testing.TB
	errs []string
}

func (r *errorsTB) Helper()                   {}
func (r *errorsTB) Error(args ...any)         { r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *errorsTB) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }

// TestCallValidatesAnswers: every answer Call receives is checked against
// openapi.yaml: a documented route answering a body its schema refuses, or a
// status it does not declare, fails the test; a documented answer and a path
// the document does not know pass.
func TestCallValidatesAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(api.HeaderRequestID, "r-1")
		switch r.URL.Path {
		case api.HealthzPath:
			fmt.Fprint(w, `{"pid":1,"status":"ok"}`)
		case api.VoucherPath("FLASH"):
			fmt.Fprint(w, `{"code":"FLASH"}`) // a voucher without its other fields
		case api.Fill(api.RouteWarmup, "FLASH"):
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, `{"code":"FLASH","loaded":true}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"unknown":true}`)
		}
	}))
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		fails        bool
	}{
		{http.MethodGet, api.HealthzPath, false},
		{http.MethodGet, "/not/documented", false},
		{http.MethodGet, api.VoucherPath("FLASH"), true},
		{http.MethodPost, api.Fill(api.RouteWarmup, "FLASH"), true},
	} {
		tb := &errorsTB{TB: t}
		httpxtest.Call(tb, srv.Client(), c.method, srv.URL+c.path, "token", nil)
		if failed := len(tb.errs) > 0; failed != c.fails {
			t.Errorf("%s %s: reported %q, want a failure %v", c.method, c.path, tb.errs, c.fails)
		}
	}
}
