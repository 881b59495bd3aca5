package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestMetricsDocumented checks the ledger's metrics against the metrics
// table of docs/operations.md: after a flash reserve, a reconcile and a sweep every
// metric documented for the ledger is registered and (unless pending) scraped
// from /metrics, without a token, with the documented type; and every
// flashgate_* family scraped is documented.
func TestMetricsDocumented(t *testing.T) {
	tl := ledgertest.New(t, ledgertest.Options{Token: "test-token"})

	// The ledger as main builds it: one registry for every package's metrics.
	svc := tl.Svc
	h := tl.Handler(func(s *web.Server) { s.MaxInflight, s.LatencySLO = 256, 100*time.Millisecond })
	ctx := context.Background()
	do := func(method, path string, body any) *httptest.ResponseRecorder {
		t.Helper()
		var rd io.Reader
		if body != nil {
			buf, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(buf)
		}
		req := httptest.NewRequest(method, path, rd)
		req.Header.Set("Authorization", "Bearer "+tl.Token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	code := ledgertest.NewCode(t)
	rec := do(http.MethodPost, "/admin/vouchers", ledgertest.Spec(code, 10, 1, true))
	require.Equal(t, http.StatusCreated, rec.Code, "create: %s", rec.Body)
	tl.TrackFlash(code)
	rec = do(http.MethodPost, "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, code+"-o1", 5_000))
	require.Equal(t, http.StatusCreated, rec.Code, "reserve: %s", rec.Body)
	rec = do(http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, rec.Code, "reconcile: %s", rec.Body)
	_, err := svc.Jobs.Sweep(ctx)
	require.NoError(t, err)
	// The event dispatcher as main builds it, with one webhook: its per-sink series.
	outbox.NewDispatcher(tl.Store, []outbox.Sink{outbox.NewWebhook("http://127.0.0.1:1/hook", outbox.WebhookConfig{Metrics: svc.Outbox})}, svc.Log,
		outbox.DispatcherConfig{Metrics: svc.Outbox})

	// The admissions consumer's per-partition series, as after a batch of partition 0.
	svc.Admitted.ObserveLag(0, 0, 0)
	httpxtest.CheckMetricsDocumented(t, h, svc.Metrics.Registry, "docs/operations.md", "ledger")
}
