// Package httpx holds what both gin servers share: the map from error code to
// HTTP status, the one function that writes an error (and logs a fault), strict
// JSON binding, bearer auth, body limits, health routes, server timeouts, and
// the shape of the reservation routes.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/voucher"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 16 << 10

// BindJSON decodes the request body into dst strictly: one JSON object, no
// unknown fields, no trailing data, at most MaxBodyBytes. Errors name the field.
func BindJSON(c *gin.Context, dst any) error { return BindJSONLimit(c, dst, MaxBodyBytes) }

// BindJSONLimit is BindJSON with another body limit (the internal batch route).
func BindJSONLimit(c *gin.Context, dst any, limit int) error {
	body, err := readBody(c, limit)
	if err != nil {
		return err
	}
	defer body.release()
	return DecodeJSON(body.b, dst)
}

// pooledBody is a request body read into a buffer that goes back to bodyPool.
type pooledBody struct {
	b   []byte
	ptr *[]byte
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBody bounds the buffers kept for reuse (the batch route's bodies
// are larger and rarer).
const maxPooledBody = MaxBodyBytes + 1

func (p pooledBody) release() {
	if cap(p.b) <= maxPooledBody {
		*p.ptr = p.b[:0]
		bodyPool.Put(p.ptr)
	}
}

// readBody checks the Content-Type and reads at most limit bytes of the body.
func readBody(c *gin.Context, limit int) (pooledBody, error) {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "Content-Type must be application/json")
	}
	p := pooledBody{ptr: bodyPool.Get().(*[]byte)}
	buf := (*p.ptr)[:0]
	for r := c.Request.Body; r != nil && len(buf) <= limit; {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			p.b = buf
			p.release()
			return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "cannot read the request body")
		}
	}
	p.b = buf
	if len(buf) > limit {
		p.release()
		return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "request body is larger than %d bytes", limit)
	}
	return p, nil
}

// DecodeJSON is the decoding half of BindJSON, separate so that it can be
// fuzzed. A reserve body (*api.ReserveRequest) is read by its own
// one-pass tokenizer (claims.go, over jsonscan.go); any other by decodeGeneric.
func DecodeJSON(body []byte, dst any) error {
	if req, ok := dst.(*api.ReserveRequest); ok {
		var f claimFields
		if err := decodeClaim(body, &f); err != nil {
			return err
		}
		f.request(req)
		return nil
	}
	return decodeGeneric(body, dst)
}

// decodeGeneric decodes body with encoding/json, then checks its keys.
func decodeGeneric(body []byte, dst any) error {
	// Only JSON's own whitespace (RFC 8259): bytes.TrimSpace would also take
	// \v, \f, U+0085 and U+00A0, and accept a body no JSON parser would.
	trimmed := bytes.Trim(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return voucher.Errorf(voucher.CodeInvalidRequest, "%s", describeJSONError(err))
	}
	if dec.More() {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body has data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body has data after the JSON object")
	}
	return checkKeys(trimmed, dst)
}

// checkKeys refuses a top-level key that appears twice or is not spelled exactly
// as one of dst's json names. encoding/json keeps the last of duplicate keys and
// matches keys case-insensitively (with Unicode folding: "cuſtomerId" is
// customerId), so without this a body could read one way to a gateway or log in
// front of us and another way to us. body has been decoded without error.
func checkKeys(body []byte, dst any) error {
	names := jsonNames(reflect.TypeOf(dst))
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return voucher.Errorf(voucher.CodeInvalidRequest, "duplicate field %q", key)
		case len(names) > 0 && !names[key]:
			return voucher.Errorf(voucher.CodeInvalidRequest, "unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
		}
	}
	return nil
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field != "" {
			return fmt.Sprintf("%s: wrong type or out of range (got %s)", typeErr.Field, typeErr.Value)
		}
		return fmt.Sprintf("request body must be a JSON object (got %s)", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &timeErr):
		return "times must be RFC 3339, e.g. 2026-12-01T10:00:00Z"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed JSON"
}

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

// Service is what both services' engines share beyond NewEngine's defaults:
// metrics, the request id, bearer auth and the open routes.
type Service struct {
	Log     *slog.Logger                  // where faults and readiness failures are logged
	Metrics *Metrics                      // nil: no /metrics
	Token   string                        // the token named DefaultActor, with every scope; with Tokens empty too: auth off
	Tokens  map[string]envconf.Credential // more tokens by name (LEDGER_TOKENS, PROXY_TOKENS), beside Token
	Scopes  RouteScopes                   // the scopes each route takes; a route missing here is refused (403)
	Ready   func(*gin.Context) error      // GET /readyz
	// MetricsElsewhere leaves /metrics off this engine: it is served on its
	// own listener (METRICS_ADDR, ServeMetricsOn).
	MetricsElsewhere bool
	// Open are the paths that need no token; nil: api.OpenPaths. A service
	// that keeps /metrics behind a token leaves it out (and gives GET
	// /metrics its scopes in Scopes).
	Open []string
	// MaxInflight bounds the requests worked on at once (MAX_INFLIGHT); the
	// excess is shed (Shedder). 0: InflightCap says.
	MaxInflight int
	// InflightCap, with MaxInflight 0, has the bound move with what requests
	// take (inflightLimit), up to InflightCap (Serving.InflightCap). Both 0:
	// no bound.
	InflightCap int
	// LatencySLO is LATENCY_SLO: a request over MaxInflight waits for a slot
	// up to half of it while the queue does not stand (slotQueue). 0: the
	// excess is shed at once.
	LatencySLO time.Duration
	// Spare, when set, is asked about a request that finds the bound full:
	// true lets it in (it takes nothing new, say a retry of an order that
	// holds its use). It must be cheap, and may read the body if it puts it
	// back.
	Spare func(*gin.Context) bool
	// Guard, when set, runs on every request after auth (so ClientName is
	// known) and before the shedder: a refusal it writes (a client over its
	// rate, a retry before its Retry-After) takes no slot of MAX_INFLIGHT, and
	// after c.Next it sees every answer, the shedder's 503s included.
	Guard gin.HandlerFunc
}

// NewServiceEngine returns NewEngine with the metrics middleware and
// /metrics, request ids, auth, the service's guard, the shedder, /healthz, /readyz and /openapi.yaml; the
// service adds its own routes.
func NewServiceEngine(s Service) *gin.Engine {
	r := NewEngine(s.Log)
	open := s.Open
	if open == nil {
		open = api.OpenPaths
	}
	// A route takes the middleware registered before it: an open /metrics
	// is registered before request ids and auth, one that needs a token
	// after auth.
	metricsOpen := slices.Contains(open, api.MetricsPath)
	if s.Metrics != nil {
		r.Use(s.Metrics.Middleware())
		if !s.MetricsElsewhere && metricsOpen {
			s.Metrics.ServeMetrics(r)
		}
	}
	r.Use(RequestID())
	// Auth before the shedder: a request without a valid token never takes
	// a slot, and the guard knows the token's name.
	r.Use(Auth(s.tokens(), s.Scopes, open...))
	if s.Metrics != nil && !s.MetricsElsewhere && !metricsOpen {
		s.Metrics.ServeMetrics(r)
	}
	if s.Guard != nil {
		r.Use(s.Guard)
	}
	if s.MaxInflight > 0 || s.InflightCap > 0 {
		var reg prometheus.Registerer
		if s.Metrics != nil {
			reg = s.Metrics.Registry
		}
		r.Use(NewShedder(s.MaxInflight, s.InflightCap, s.LatencySLO, s.Spare, reg).Middleware())
	}
	Health(r, s.Ready)
	ServeOpenAPI(r)
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

var jsonNamesOf sync.Map // reflect.Type -> map[string]bool

// jsonNames returns the json field names of the struct t points to (empty for
// anything else), computed once per type.
func jsonNames(t reflect.Type) map[string]bool {
	if names, ok := jsonNamesOf.Load(t); ok {
		return names.(map[string]bool)
	}
	names := map[string]bool{}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		for f := range t.Elem().Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names[name] = true
			}
		}
	}
	jsonNamesOf.Store(t, names)
	return names
}

// CodeParam returns the validated :code path parameter.
func CodeParam(c *gin.Context) (string, error) {
	code := c.Param("code")
	if !voucher.ValidCode(code) {
		return "", voucher.Errorf(voucher.CodeInvalidRequest, "code must match ^[A-Za-z0-9_-]{1,32}$")
	}
	return code, nil
}

// OrderParams returns the validated :code and :orderId path parameters.
func OrderParams(c *gin.Context) (code, orderID string, err error) {
	if code, err = CodeParam(c); err != nil {
		return "", "", err
	}
	orderID = c.Param("orderId")
	if !voucher.ValidOrderID(orderID) {
		return "", "", voucher.Errorf(voucher.CodeInvalidRequest, "orderId must match ^[A-Za-z0-9_.:-]{1,64}$")
	}
	return code, orderID, nil
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
