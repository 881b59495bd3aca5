package attack

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// adminToken is the harness's own ledger token, with every scope: it creates
// the vouchers and reads the metrics.
const adminToken = "attack-admin"

// Auth is the credentials a scenario's stack runs with. The harness decides
// them here and nowhere else: the edge's defaults change as it learns tokens
// (a proxy without PROXY_TOKENS or PROXY_TOKEN refuses to start unless
// PROXY_AUTH=off), and every scenario but creds wants an open edge.
type Auth struct {
	LedgerTokens     string // LEDGER_TOKENS, naming adminToken among them; empty: LEDGER_TOKEN=adminToken alone
	ProxyLedgerToken string // the proxy's LEDGER_TOKEN; empty: adminToken
	ProxyTokens      string // PROXY_TOKENS; empty: PROXY_AUTH=off, an edge without tokens
}

// env is a's environment for the ledger and for the proxy, added after the
// stack's own (a later entry of a variable wins).
func (a Auth) env() (ledger, proxy []string) {
	if a.LedgerTokens != "" {
		ledger = append(ledger, "LEDGER_TOKENS="+a.LedgerTokens)
	}
	proxy = append(proxy, "LEDGER_TOKEN="+cmp.Or(a.ProxyLedgerToken, adminToken))
	// An empty variable reads as unset: whatever token the stack gives its
	// proxy, the edge has a's tokens or none.
	proxy = append(proxy, "PROXY_TOKEN=", "PROXY_TOKENS="+a.ProxyTokens)
	if a.ProxyTokens == "" {
		proxy = append(proxy, "PROXY_AUTH=off")
	} else {
		proxy = append(proxy, "PROXY_AUTH=") // the stack opens its edge; tokens close it (on beside them)
	}
	return ledger, proxy
}

// rig is one scenario's stack and the bench that checks it.
type rig struct {
	st    *stack.Stack
	bench *verify.Bench
	// metricsURL is where the ledger serves /metrics: its own listener when
	// METRICS_ADDR is set.
	metricsURL string
}

// startRig starts a stack of its own with a's credentials, ledgerEnv and
// proxyEnv added (and pgSettings, its Postgres's), and opens the bench on it
// with the admin token.
func startRig(ctx context.Context, cfg Config, a Auth, ledgerEnv, proxyEnv []string, pgSettings ...string) (*rig, error) {
	lenv, penv := a.env()
	token := adminToken
	if a.LedgerTokens != "" {
		token = "" // named in LEDGER_TOKENS: the ledger refuses one token under two names
	}
	st, err := stack.Start(stack.Options{BinDir: cfg.BinDir, Token: token, ServiceLog: cfg.ServiceLog,
		LedgerEnv: append(lenv, ledgerEnv...), ProxyEnv: append(penv, proxyEnv...), PGSettings: pgSettings})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotUp, err)
	}
	e := st.Endpoints()
	e.Token = adminToken
	b, err := verify.OpenBench(ctx, e)
	if err != nil {
		st.Stop()
		return nil, err
	}
	return &rig{st: st, bench: b, metricsURL: st.LedgerURL + api.MetricsPath}, nil
}

// Close stops the stack and removes its data.
func (r *rig) Close() {
	r.bench.Close()
	r.st.Stop()
}

// sale creates a fresh flash voucher of stock uses, perUserLimit 1, and
// returns its code.
func (r *rig) sale(ctx context.Context, label string, stock int) (string, error) {
	spec := verify.VoucherSpec{Code: verify.NewCode(label), Stock: stock, PerUser: 1, Flash: true}
	return spec.Code, r.bench.CreateVoucher(ctx, spec)
}

// ledgerMetrics reads the ledger's metrics page.
func (r *rig) ledgerMetrics(ctx context.Context) (string, error) {
	ans, err := call(ctx, &http.Client{Timeout: 10 * time.Second}, http.MethodGet, r.metricsURL, adminToken, nil)
	if err != nil {
		return "", err
	}
	if ans.Status != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d", r.metricsURL, ans.Status)
	}
	return string(ans.Body), nil
}

// metricSum adds up the samples of metric name (a counter, or a histogram's
// name_count) whose labels contain every one of labels (`route="..."`).
func metricSum(page, name string, labels ...string) float64 {
	return metricSumFunc(page, name, func(set string) bool {
		for _, l := range labels {
			if !strings.Contains(set, l) {
				return false
			}
		}
		return true
	})
}

// metricSumFunc adds up the samples of metric name whose label set (the
// text between its braces) match accepts.
func metricSumFunc(page, name string, match func(labels string) bool) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		end := strings.LastIndexByte(rest, '}')
		if !match(rest[:end+1]) {
			continue
		}
		fields := strings.Fields(rest[end+1:])
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// answer is one HTTP answer as the scenarios judge it.
type answer struct {
	Status     int
	Code       string // "error" of an error body
	RetryAfter string
	Body       []byte
}

func (a answer) String() string {
	if a.Code != "" {
		return fmt.Sprintf("%d %s", a.Status, a.Code)
	}
	return strconv.Itoa(a.Status)
}

// call sends one request with token as its bearer (none when empty) and
// body as JSON (none when nil), and reads the answer.
func call(ctx context.Context, client *http.Client, method, url, token string, body []byte) (answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	a := answer{Status: resp.StatusCode, RetryAfter: resp.Header.Get(api.HeaderRetryAfter), Body: raw}
	if a.Status >= 300 {
		a.Code = jsonError(raw)
	}
	return a, nil
}

// jsonError is the "error" of an error body, or "".
func jsonError(body []byte) string {
	const key = `"error":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return ""
	}
	rest := body[i+len(key):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// clientFrom is an HTTP client whose connections leave from ip (any of
// 127.0.0.0/8 on loopback; "" the system's choice), keeping conns idle.
func clientFrom(ip string, conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: load.LocalTCPAddr(ip)}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}

// reserveBody is a reserve of orderID by customer, eligible for every
// voucher the harness creates.
func reserveBody(orderID string, customer int64) []byte {
	return fmt.Appendf(nil, `{"customerId":%d,"orderId":%q,"orderAmount":%d}`, customer, orderID, load.OrderAmount)
}

// statusCount counts answers by "status CODE".
type statusCount map[string]int

func (s statusCount) String() string { return verify.StatusList(s) }
