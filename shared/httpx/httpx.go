// Package httpx is the plumbing both gin servers share: the map from error code
// to HTTP status, the one function that writes an error (and logs a fault),
// request ids, health routes, server timeouts, the lifecycle from listen to
// drain, the connection cap and metrics. Below it nothing of flashgate's HTTP;
// above it, each importing it and none another: decode (strict request
// bodies), auth (tokens and scopes), overload (the bound on requests in
// flight), and service, which assembles an engine from them all.
package httpx

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ReadyTimeout bounds one readiness check: a hung dependency makes /readyz
// answer 503 within it, never hang.
const ReadyTimeout = time.Second

// Health registers GET /healthz (the process is up, with its pid: it checks
// nothing else)
// and GET /readyz (200 only while ready answers nil within ReadyTimeout).
func Health(r gin.IRoutes, ready func(*gin.Context) error) {
	// The pid tells a starter (devstack, the load harness) that its own child
	// answers, not another process holding the port.
	pid := os.Getpid()
	r.GET(api.HealthzPath, func(c *gin.Context) { c.JSON(http.StatusOK, api.Health{PID: pid, Status: "ok"}) })
	r.GET(api.ReadyzPath, func(c *gin.Context) {
		if err := checkReady(c, ready); err != nil {
			LoggerFrom(c).Warn("not ready", "err", err)
			SetRetryAfter(c, 0)
			c.JSON(http.StatusServiceUnavailable, api.ErrorBody{Error: voucher.CodeUnavailable, Message: "not ready"})
			return
		}
		c.JSON(http.StatusOK, api.Ready{Status: "ready"})
	})
}

// checkReady runs ready with ReadyTimeout as its context's deadline (engines
// from NewEngine read their context from the request) and answers at that
// deadline even if ready ignores it, on its own copy of c.
func checkReady(c *gin.Context, ready func(*gin.Context) error) error {
	ctx, cancel := context.WithTimeout(c.Request.Context(), ReadyTimeout)
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
	cp := c.Copy()
	done := make(chan error, 1)
	go func() { done <- ready(cp) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("readiness check: no answer within %s: %w", ReadyTimeout, ctx.Err())
	}
}

// NewEngine returns a gin engine with flashgate's defaults: log on every
// request (LoggerFrom), recovery, JSON 404 and 405 answers, and no trusted
// proxies. gin's mode is global: each main sets it.
func NewEngine(log *slog.Logger) *gin.Engine {
	r := gin.New()
	// Handlers pass the gin.Context on as their context: let it carry the
	// request's cancellation and deadline.
	r.ContextWithFallback = true
	// A path with a trailing slash is not found, like any other unknown path:
	// gin's default answers 301/307 with an HTML body and a Location built
	// from the client's X-Forwarded-Prefix header.
	r.RedirectTrailingSlash = false
	r.Use(Logger(log), gin.CustomRecovery(func(c *gin.Context, recovered any) {
		WriteError(c, fmt.Errorf("panic in handler: %v: %w", recovered, voucher.ErrUnavailable))
	}))
	r.HandleMethodNotAllowed = true
	r.NoRoute(func(c *gin.Context) {
		WriteError(c, voucher.Errorf(voucher.CodeNotFound, "no such route"))
	})
	r.NoMethod(func(c *gin.Context) {
		WriteError(c, voucher.Errorf(voucher.CodeMethodNotAllowed, "method not allowed on this route"))
	})
	_ = r.SetTrustedProxies(nil)
	return r
}

// NewServer returns an http.Server with timeouts set, so that slow clients
// cannot hold connections open.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// ServeDebug serves net/http/pprof on addr (loopback only, for profiling under
// load); it returns at once when addr is empty. A taken or foreign address,
// or one that is not loopback (CheckLoopback), stops the start, naming DEBUG_ADDR.
func ServeDebug(addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	if err := CheckLoopback("DEBUG_ADDR", addr); err != nil {
		return err
	}
	ln, err := Listen("DEBUG_ADDR", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Warn("pprof listener stopped", "addr", addr, "err", err)
		}
	}()
	return nil
}
