package httpxtest

import (
	"bytes"
	"context"
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

// LoadOpenAPI loads and validates shared/api's openapi.yaml with kin-openapi, as
// an adopting team's tooling would.
func LoadOpenAPI(tb testing.TB) *openapi3.T {
	tb.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		tb.Fatalf("kin-openapi: load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		tb.Fatalf("kin-openapi: openapi.yaml is not valid: %v", err)
	}
	return doc
}

// SpecChecker validates live responses against openapi.yaml: every response
// to a documented operation must have a documented status, headers and a body
// matching its schema. Transport wraps a client's transport with it.
type SpecChecker struct {
	tb     testing.TB
	router routers.Router

	mu      sync.Mutex
	checked map[string]int // "METHOD /path status" -> responses validated
}

// NewSpecChecker returns a checker of the responses of the service at base
// (the document's servers are replaced by base: the test stack's ports).
func NewSpecChecker(tb testing.TB, base string) *SpecChecker {
	tb.Helper()
	doc := LoadOpenAPI(tb)
	doc.Servers = openapi3.Servers{{URL: base}}
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		tb.Fatalf("kin-openapi: router: %v", err)
	}
	return &SpecChecker{tb: tb, router: router, checked: map[string]int{}}
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

// Check validates one response to req against the document.
func (s *SpecChecker) Check(req *http.Request, status int, header http.Header, body []byte) {
	s.tb.Helper()
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		return // not a documented route (a 404 by design): nothing to check against
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		s.tb.Errorf("%s %s answered %d %s: not as openapi.yaml says: %v", req.Method, req.URL.Path, status, body, err)
	}
	s.mu.Lock()
	s.checked[req.Method+" "+route.Path+" "+http.StatusText(status)]++
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
