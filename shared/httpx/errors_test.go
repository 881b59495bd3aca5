package httpx_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/httpx/service"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestWriteErrorLogsFaults: a 503, whatever its cause, leaves exactly one log
// line with the request id, route, method and cause; an answer with a code a
// client can act on leaves none; the bearer token never appears.
func TestWriteErrorLogsFaults(t *testing.T) {
	const token = "secret-token-xyz"
	tests := []struct {
		name   string
		err    error
		status int
		lines  int
	}{
		{"redis fault", fmt.Errorf("reserve V in redis: %w: %w", errors.New("dial tcp: refused"), voucher.ErrUnavailable), 503, 1},
		{"bare fault", errors.New("boom"), 503, 1},
		{"unavailable", voucher.ErrUnavailable, 503, 1},
		{"out of stock", voucher.ErrOutOfStock, 409, 0},
		{"panic", nil, 503, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := service.NewEngine(service.Config{
				Log: slog.New(slog.NewJSONHandler(&logs, nil)), Token: token,
				Scopes: auth.RouteScopes{"POST /vouchers/:code/reservations": {auth.ScopeReserve}},
				Ready:  func(*gin.Context) error { return nil },
			})
			r.POST("/vouchers/:code/reservations", func(c *gin.Context) {
				if tt.err == nil {
					panic("handler bug")
				}
				httpx.WriteError(c, tt.err)
			})
			req := httptest.NewRequest(http.MethodPost, "/vouchers/V/reservations", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(api.HeaderRequestID, "probe-503-xyz")
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			if w.Code != tt.status {
				t.Fatalf("WriteError(%v) answered %d, want %d", tt.err, w.Code, tt.status)
			}
			out := logs.String()
			if n := strings.Count(out, "probe-503-xyz"); n != tt.lines {
				t.Errorf("WriteError(%v) logged %d lines with the request id, want %d:\n%s", tt.err, n, tt.lines, out)
			}
			if strings.Contains(out, token) {
				t.Errorf("the log holds the token:\n%s", out)
			}
			if tt.lines == 1 {
				for _, want := range []string{`"route":"/vouchers/:code/reservations"`, `"method":"POST"`, `"err":`} {
					if !strings.Contains(out, want) {
						t.Errorf("log line lacks %s:\n%s", want, out)
					}
				}
			}
		})
	}
}

// TestWriteErrorPreEncoded: a shared answer (OUT_OF_STOCK, PAUSED ...) is
// written from bytes encoded once, and the client sees exactly what c.JSON
// writes: status, headers and body, byte for byte, after whatever the chain
// set before (the request id).
func TestWriteErrorPreEncoded(t *testing.T) {
	errs := []*voucher.Error{voucher.ErrOutOfStock, voucher.ErrAlreadyUsed, voucher.ErrPaused,
		voucher.ErrOrderTooSmall, voucher.ErrOrderConflict, voucher.ErrReservationReleased, voucher.ErrVoucherNotFound}
	for _, e := range errs {
		t.Run(e.Code, func(t *testing.T) {
			serve := func(write func(*gin.Context)) *httptest.ResponseRecorder {
				r := service.NewEngine(service.Config{})
				r.POST("/x", write)
				w := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodPost, "/x", nil)
				req.Header.Set(api.HeaderRequestID, "same-id")
				r.ServeHTTP(w, req)
				return w
			}
			got := serve(func(c *gin.Context) { httpx.WriteError(c, e) })
			want := serve(func(c *gin.Context) {
				status, body := httpx.ErrorReply(fmt.Errorf("wrapped: %w", e))
				c.AbortWithStatusJSON(status, body)
			})
			if got.Code != want.Code || got.Body.String() != want.Body.String() {
				t.Errorf("WriteError(%s) = %d %s, want %d %s", e.Code, got.Code, got.Body, want.Code, want.Body)
			}
			if fmt.Sprint(got.Header()) != fmt.Sprint(want.Header()) {
				t.Errorf("WriteError(%s) headers %v, want %v", e.Code, got.Header(), want.Header())
			}
		})
	}
}
