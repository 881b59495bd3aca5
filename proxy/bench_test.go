package main

import (
	"context"
	"net/http"
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
