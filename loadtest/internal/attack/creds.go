package attack

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The creds attack's tokens, in the contract's syntax name:token[:scope+scope...]:
// on the ledger the harness's admin (every scope), a payment service's
// (settle) and the proxy's (internal); on the edge a shop's (reserve) and a
// payment service's (settle).
const (
	paymentsToken = "attack-payments"
	edgeToken     = "attack-edge"
	shopToken     = "attack-shop"
	payEdgeToken  = "attack-pay"
	// codeForbidden is the error code of a call without the scope it needs.
	codeForbidden = voucher.CodeForbidden
)

var credsAuth = Auth{
	LedgerTokens:     "admin:" + adminToken + ",payments:" + paymentsToken + ":settle,edge:" + edgeToken + ":internal",
	ProxyLedgerToken: edgeToken,
	ProxyTokens:      "shop:" + shopToken + ":reserve,pay:" + payEdgeToken + ":settle",
}

// credsWants are the creds attack's wants, in the order they are judged; a
// stack that does not start fails each of them.
var credsWants = []string{
	"payments (settle) cannot PATCH a voucher", "payments (settle) cannot pause", "payments (settle) cannot create a voucher",
	"payments (settle) cannot export", "payments (settle) cannot read events", "payments (settle) cannot write through /internal",
	"reserve-only edge token cannot confirm", "reserve-only edge token cannot refund", "reserve-only edge token cannot release",
	"no token on the edge: 401", "the proxy refuses to start without tokens", "ledger /metrics only on METRICS_ADDR",
}

// runCreds starts a stack with scoped tokens on both services and the
// ledger's metrics on a listener of their own, and tries each token on what
// its scopes do not allow.
func runCreds(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: "creds"}
	metricsAddr, err := stack.AddrOr("")
	if err != nil {
		return nil, err
	}
	r, err := startRig(ctx, cfg, credsAuth, []string{"METRICS_ADDR=" + metricsAddr}, nil)
	if err != nil {
		res.figure("stack with LEDGER_TOKENS=%q PROXY_TOKENS=%q METRICS_ADDR: %s", credsAuth.LedgerTokens, credsAuth.ProxyTokens, why(err))
		for _, w := range credsWants {
			res.want(w, false, "not measured: the stack refused the scoped tokens")
		}
		return res.finish(), nil
	}
	defer r.Close()
	code, err := r.sale(ctx, "creds", 100)
	if err != nil {
		return nil, err
	}
	order := code + "-o1"
	c := credsCalls{ctx: ctx, client: &http.Client{Timeout: 10 * time.Second}, res: res}
	c.control("shop token reserves on the edge", http.StatusCreated, http.MethodPost,
		r.st.ProxyURL+api.ReservationsPath(code), shopToken, reserveBody(order, 1))
	c.ledgerRefusals(r.st.LedgerURL, code, order)
	c.edgeRefusals(r.st.ProxyURL, code, order)
	c.control("payments token confirms on the ledger", http.StatusOK, http.MethodPost,
		r.st.LedgerURL+api.Fill(api.RouteConfirm, code, order), paymentsToken, nil)
	// The same proxy with PROXY_AUTH=off must start: the refusal is then
	// the missing tokens', not another fault of the start (an empty
	// variable reads as unset).
	_, _, noTokens := r.st.StartProxyLike("proxy-no-tokens", "", "PROXY_TOKENS=", "PROXY_TOKEN=", "PROXY_AUTH=")
	_, _, authOff := r.st.StartProxyLike("proxy-auth-off", "", "PROXY_TOKENS=", "PROXY_TOKEN=", "PROXY_AUTH=off")
	res.want("the proxy refuses to start without tokens", noTokens != nil && authOff == nil,
		"without tokens: %s; with PROXY_AUTH=off: %s", refusedOrStarted(noTokens), refusedOrStarted(authOff))
	c.metricsListener(r.st.LedgerURL, "http://"+metricsAddr)
	return res.finish(), nil
}

// credsCalls sends the creds attack's calls and judges their answers.
type credsCalls struct {
	ctx    context.Context
	client *http.Client
	res    *Result
}

// expect judges one call: want is the status it must be answered.
func (c credsCalls) expect(name string, want int, method, url, token string, body []byte) {
	a, err := call(c.ctx, c.client, method, url, token, body)
	if err != nil {
		c.res.want(name, false, "%s", firstLine(err))
		return
	}
	ok := a.Status == want && (want != http.StatusForbidden || a.Code == codeForbidden)
	c.res.want(name, ok, "%s %s: %s", method, strings.TrimPrefix(url, "http://"), a)
}

// control is a call that must succeed for the refusals around it to mean
// anything: a figure, not a want.
func (c credsCalls) control(name string, want int, method, url, token string, body []byte) {
	a, err := call(c.ctx, c.client, method, url, token, body)
	switch {
	case err != nil:
		c.res.figure("control %s: %s", name, firstLine(err))
	default:
		c.res.figure("control %s: %s (want %d)", name, a, want)
	}
}

// ledgerRefusals tries the payments token (settle) on what needs read,
// write or internal.
func (c credsCalls) ledgerRefusals(ledger, code, order string) {
	discount, total, newCode := int64(100_000_000), 10, code+"x"
	start, end := time.Now().UTC().Truncate(time.Second), time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	created, _ := json.Marshal(voucher.NewVoucher{Code: &newCode, DiscountAmount: &discount, TotalLimit: &total, StartsAt: &start, EndsAt: &end})
	patch, _ := json.Marshal(voucher.VoucherPatch{DiscountAmount: &discount})
	for _, t := range []struct {
		want, method, path string
		body               []byte
	}{
		{"payments (settle) cannot PATCH a voucher", http.MethodPatch, api.VoucherPath(code), patch},
		{"payments (settle) cannot pause", http.MethodPost, api.Fill(api.RoutePause, code), nil},
		{"payments (settle) cannot create a voucher", http.MethodPost, api.RouteVouchers, created},
		{"payments (settle) cannot export", http.MethodGet, api.Fill(api.RouteExport, code), nil},
		{"payments (settle) cannot read events", http.MethodGet, api.RouteEvents, nil},
		{"payments (settle) cannot write through /internal", http.MethodPost, api.Fill(api.RouteAdmitted, code), reserveBody(order+"i", 2)},
	} {
		c.expect(t.want, http.StatusForbidden, t.method, ledger+t.path, paymentsToken, t.body)
	}
}

// edgeRefusals tries the shop's reserve-only token on what needs settle,
// and no token at all.
func (c credsCalls) edgeRefusals(proxy, code, order string) {
	c.expect("reserve-only edge token cannot confirm", http.StatusForbidden, http.MethodPost, proxy+api.Fill(api.RouteConfirm, code, order), shopToken, nil)
	c.expect("reserve-only edge token cannot refund", http.StatusForbidden, http.MethodPost, proxy+api.Fill(api.RouteRefund, code, order), shopToken, nil)
	c.expect("reserve-only edge token cannot release", http.StatusForbidden, http.MethodDelete, proxy+api.ReservationPath(code, order), shopToken, nil)
	c.expect("no token on the edge: 401", http.StatusUnauthorized, http.MethodPost, proxy+api.ReservationsPath(code), "", reserveBody(order+"n", 3))
}

// metricsListener wants the ledger's metrics on METRICS_ADDR and not on its
// main listener.
func (c credsCalls) metricsListener(ledger, metrics string) {
	main, errMain := call(c.ctx, c.client, http.MethodGet, ledger+api.MetricsPath, adminToken, nil)
	own, errOwn := call(c.ctx, c.client, http.MethodGet, metrics+api.MetricsPath, "", nil)
	if errMain != nil || errOwn != nil {
		c.res.want("ledger /metrics only on METRICS_ADDR", false, "main listener: %v; METRICS_ADDR: %v", errMain, errOwn)
		return
	}
	c.res.want("ledger /metrics only on METRICS_ADDR", main.Status != http.StatusOK && own.Status == http.StatusOK,
		"main listener %s, METRICS_ADDR %s", main, own)
}

// refusedOrStarted says how a start without tokens ended.
func refusedOrStarted(err error) string {
	if err == nil {
		return "started"
	}
	return "refused: " + why(err)
}

// why is a failed start's reason: the first error a service logged, else
// the error's first line.
func why(err error) string {
	const field = `"err":"`
	for _, l := range strings.Split(err.Error(), "\n") {
		if _, rest, ok := strings.Cut(l, field); ok {
			reason, _, _ := strings.Cut(rest, `"`)
			return firstLine(err) + ": " + reason
		}
	}
	return firstLine(err)
}

// firstLine is err's first line: a failed start carries the service's log.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
