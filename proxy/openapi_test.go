package main

import (
	"context"
	"testing"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestOpenAPIRoutes checks the proxy's routes against the OpenAPI document it
// serves: every registered route is documented as served by the proxy, and every
// operation the document says the proxy serves is registered. Handler does not
// touch the Server's dependencies while registering, so none are needed.
func TestOpenAPIRoutes(t *testing.T) {
	srv := &edge.Server{Metrics: httpx.NewMetrics("proxy"), Ready: func(context.Context) error { return nil }}
	httpxtest.CheckOpenAPIRoutes(t, srv.Handler(), "proxy")
}

// TestOpenAPIResponses validates the proxy's live answers (through
// shared/client) against openapi.yaml with kin-openapi.
func TestOpenAPIResponses(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	code := newCode(t)
	s.createVoucher(t, code, 5, 1, true)
	httpxtest.CheckLiveResponses(t, s.ProxyURL, "", code)
}
