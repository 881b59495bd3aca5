package web_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestOpenAPIRoutes checks the ledger's routes against the OpenAPI document it
// serves: every registered route is documented as served by the ledger, and every
// operation the document says the ledger serves is registered. Handler does not
// touch the Server's dependencies while registering, so none are needed.
func TestOpenAPIRoutes(t *testing.T) {
	srv := &web.Server{Metrics: httpx.NewMetrics("ledger"), Ready: func(*gin.Context) error { return nil }}
	httpxtest.CheckOpenAPIRoutes(t, srv.Handler(), "ledger")
}

// TestOpenAPIResponses validates the ledger's live answers (through
// shared/client) against openapi.yaml with kin-openapi, auth on.
func TestOpenAPIResponses(t *testing.T) {
	l := ledgertest.New(t, ledgertest.Options{Token: "test-token"})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	httpxtest.CheckLiveResponses(t, l.URL, l.Token, code)
}
