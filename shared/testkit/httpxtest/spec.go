package httpxtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/flashgate/flashgate/shared/api"
)

// LoadOpenAPI loads and validates shared/api's openapi.yaml with kin-openapi,
// as an adopting team's tooling would.
func LoadOpenAPI(tb testing.TB) *openapi3.T {
	tb.Helper()
	doc, err := loadOpenAPI()
	if err != nil {
		tb.Fatal(err)
	}
	return doc
}

func loadOpenAPI() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("kin-openapi: load openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("kin-openapi: openapi.yaml is not valid: %w", err)
	}
	return doc, nil
}

// specRouter finds a request's operation in the document whatever its host:
// the servers are dropped, as the tests' services listen on ports of their own.
var specRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := loadOpenAPI()
	if err != nil {
		return nil, err
	}
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("kin-openapi: router: %w", err)
	}
	return router, nil
})

// CheckAnswer validates one answer to req against openapi.yaml with
// kin-openapi's response validation: a documented status, its headers and a
// body matching its schema. An answer to a path or method the document does
// not describe (a 404 or 405 by design) is not checked, nor one past the
// first perShape of its operation, status and body shape in this binary. It returns the
// operation's path pattern ("" when unchecked) and fails tb on a mismatch.
// Call checks every answer it receives with it.
func CheckAnswer(tb testing.TB, req *http.Request, status int, header http.Header, body []byte) string {
	tb.Helper()
	router, err := specRouter()
	if err != nil {
		tb.Error(err)
		return ""
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return "" // not a documented route (a 404 by design): nothing to check against
	}
	if !firstOfShape(fmt.Sprintf("%s %s %d", req.Method, route.Path, status), body) {
		return route.Path
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		tb.Errorf("%s %s answered %d %.2000s: not as openapi.yaml says: %v", req.Method, req.URL.Path, status, body, err)
	}
	return route.Path
}

// SpecChecker validates live responses against openapi.yaml: every response
// to a documented operation must have a documented status, headers and a body
// matching its schema. Transport wraps a client's transport with it.
type SpecChecker struct {
	tb testing.TB

	mu      sync.Mutex
	checked map[string]int // "METHOD /path status" -> responses validated
}

// NewSpecChecker returns a checker of the responses of the service at base
// (any host is accepted: base names the service for the reader).
func NewSpecChecker(tb testing.TB, base string) *SpecChecker {
	tb.Helper()
	_ = base
	if _, err := specRouter(); err != nil {
		tb.Fatal(err)
	}
	return &SpecChecker{tb: tb, checked: map[string]int{}}
}

// Transport returns next (nil: http.DefaultTransport) with every response
// validated; a response that breaks the document fails the test.
func (s *SpecChecker) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return resp, err
		}
		s.Check(req, resp.StatusCode, resp.Header, body)
		return resp, nil
	})
}

// Check validates one response to req against the document (CheckAnswer)
// and counts it.
func (s *SpecChecker) Check(req *http.Request, status int, header http.Header, body []byte) {
	s.tb.Helper()
	path := CheckAnswer(s.tb, req, status, header, body)
	if path == "" {
		return
	}
	s.mu.Lock()
	s.checked[req.Method+" "+path+" "+http.StatusText(status)]++
	s.mu.Unlock()
}

// Checked returns how many responses were validated, by "METHOD /path Status".
func (s *SpecChecker) Checked() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.checked))
	for k, v := range s.checked {
		out[k] = v
	}
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// RunChecker validates answers outside any one test, for a TestMain that
// wraps a transport every test's calls go through (http.DefaultTransport,
// which clients built without an http.Client use): a mismatch is kept and
// told by Failures, which the TestMain turns into a failed run.
type RunChecker struct {
	tb *collectTB
}

// NewRunChecker returns a RunChecker; the document is loaded at the first
// answer.
func NewRunChecker() *RunChecker { return &RunChecker{tb: &collectTB{}} }

// Transport returns next (nil: http.DefaultTransport) with every answer to
// a documented operation validated.
func (r *RunChecker) Transport(next http.RoundTripper) http.RoundTripper {
	return (&SpecChecker{tb: r.tb, checked: map[string]int{}}).Transport(next)
}

// Failures returns the mismatches seen so far.
func (r *RunChecker) Failures() []string {
	r.tb.mu.Lock()
	defer r.tb.mu.Unlock()
	return append([]string(nil), r.tb.errs...)
}

// collectTB is the testing.TB CheckAnswer reports to outside a test: it keeps
// the errors (CheckAnswer calls only Helper, Error and Errorf).
type collectTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (c *collectTB) Helper() {}

func (c *collectTB) Error(args ...any) { c.add(fmt.Sprint(args...)) }

func (c *collectTB) Errorf(format string, args ...any) { c.add(fmt.Sprintf(format, args...)) }

func (c *collectTB) add(s string) {
	c.mu.Lock()
	c.errs = append(c.errs, s)
	c.mu.Unlock()
}
