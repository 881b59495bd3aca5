package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// The proxy's whole gin chain (metrics, request id, shedder, auth, the reserve
// handler, the admitter) in process, without the network, on the two paths
// that answer at the edge. loadtest's BenchmarkCeiling is the bare gin handler
// they are measured against: the sold-out path should allocate no more.

// benchHandler is the proxy's engine as main builds it (metrics on, the
// MAX_INFLIGHT default, the edge's limits at their defaults: early retries
// refused, no client or customer rate) over s's admitter.
func benchHandler(s *stack) http.Handler {
	srv := &edge.Server{Admit: s.admit, Ledger: s.ledger, Metrics: httpx.NewMetrics("proxy"),
		MaxInflight: 256, Ready: func(context.Context) error { return nil },
		Limits: limits.New(limits.Config{EarlyRetries: true}, nil, nil)}
	return srv.Handler()
}

// BenchmarkReserveSoldOut: a flash voucher whose one use is gone; the local
// sold-out flag answers 409 OUT_OF_STOCK.
func BenchmarkReserveSoldOut(b *testing.B) {
	s := newStack(b, stackOptions{coalesce: true})
	code := newCode(b)
	s.createVoucher(b, code, 1, 1, true)
	r := s.reserve(b, code, 1, code+"-1")
	require.Equal(b, 201, r.Status, r.Raw)
	require.Equal(b, 409, s.reserve(b, code, 2, code+"-2").Status) // Redis refuses and sets the flag
	body := []byte(`{"customerId":3,"orderId":"bench-order-1","orderAmount":5000}`)
	httpxtest.BenchServe(b, benchHandler(s), api.ReservationsPath(code), body, http.StatusConflict)
}

// BenchmarkReserveRedisDecides: a flash voucher with stock, the customer at
// its per-customer limit; the Redis script answers 409 ALREADY_USED (one
// script call per request: the benchmark sends one at a time).
func BenchmarkReserveRedisDecides(b *testing.B) {
	s := newStack(b, stackOptions{coalesce: true})
	code := newCode(b)
	s.createVoucher(b, code, 1_000_000, 1, true)
	r := s.reserve(b, code, 1, code+"-1")
	require.Equal(b, 201, r.Status, r.Raw)
	body := []byte(`{"customerId":1,"orderId":"bench-order-2","orderAmount":5000}`)
	httpxtest.BenchServe(b, benchHandler(s), api.ReservationsPath(code), body, http.StatusConflict)
}

// TestSoldOutAllocatesAsTheCeiling: the sold-out answer through the proxy's
// whole chain allocates no more than the ceiling's bare gin handler
// (BenchmarkCeiling: 4), counted over 1,000 answers: gin's keys (2), the
// orderId, and what the guard learned of the reserve. The claim and the
// voucher's terms kept apart, and an order key made for every reserve, were
// 6.
func TestSoldOutAllocatesAsTheCeiling(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true}) // not parallel: AllocsPerRun counts the whole process's
	code := newCode(t)
	s.createVoucher(t, code, 1, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-1").Status)
	require.Equal(t, 409, s.reserve(t, code, 2, code+"-2").Status) // Redis refuses and sets the flag
	serve := serveInProcess(t, benchHandler(s), api.ReservationsPath(code),
		[]byte(`{"customerId":3,"orderId":"alloc-order-1","orderAmount":5000}`), http.StatusConflict)
	serve() // the first answer fills caches and pools
	if allocs := testing.AllocsPerRun(1000, serve); allocs > 4 {
		t.Errorf("sold-out reserve = %v allocations, want at most 4 (the ceiling's)", allocs)
	}
}

// serveInProcess returns a function that sends one request of body to path
// through h, without the network, and checks its status; the request and
// the writer are made once (httpxtest.BenchServe's, for a test).
func serveInProcess(t *testing.T, h http.Handler, path string, body []byte, want int) func() {
	t.Helper()
	u, err := url.Parse(path)
	require.NoError(t, err)
	rd := bytes.NewReader(body)
	req := &http.Request{Method: http.MethodPost, URL: u, RequestURI: path, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(rd),
		ContentLength: int64(len(body)), Host: "alloc", RemoteAddr: "127.0.0.1:1"}
	req = req.WithContext(t.Context())
	w := &statusWriter{h: http.Header{}}
	return func() {
		rd.Reset(body)
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, req)
		if w.status != want {
			t.Fatalf("POST %s = %d, want %d", path, w.status, want)
		}
	}
}

// statusWriter keeps the status and drops the body.
type statusWriter struct {
	h      http.Header
	status int
}

func (w *statusWriter) Header() http.Header         { return w.h }
func (w *statusWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *statusWriter) WriteHeader(status int)      { w.status = status }
