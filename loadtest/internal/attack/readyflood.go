package attack

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// readyFlood sizes the readiness flood: cheap requests (/readyz, /healthz,
// /metrics: open, never shed) from Workers clients flat out for For while
// the ledger's /readyz takes readySlow, then Real requests of real traffic
// (GETs of an order) once it answers again.
type readyFlood struct {
	For           time.Duration
	Workers, Real int
}

var (
	readyFull  = readyFlood{For: 10 * time.Second, Workers: 200, Real: 200}
	readyShort = readyFlood{For: 3 * time.Second, Workers: 100, Real: 50}
)

// readySlow is how long the ledger's /readyz takes during the flood: past
// the proxy's LEDGER_TIMEOUT (1 s), so that each call through the request
// breaker would count as a failure.
const readySlow = 2 * time.Second

// readyzTap stands between the proxy and the ledger: it counts the ledger
// /readyz calls and holds each for readySlow while slow is set.
type readyzTap struct {
	srv    *http.Server
	url    string
	readyz atomic.Int64
	slow   atomic.Bool
}

func startReadyzTap(ledgerAddr string) (*readyzTap, error) {
	target, err := url.Parse("http://" + ledgerAddr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &readyzTap{url: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a probe the proxy gave up on, every flood
	t.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.ReadyzPath {
			t.readyz.Add(1)
			if t.slow.Load() {
				select {
				case <-time.After(readySlow):
				case <-r.Context().Done():
				}
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

// runReadyFlood floods the proxy's open routes beside a slow ledger
// readiness, then sends real traffic once the ledger answers again.
func runReadyFlood(ctx context.Context, cfg Config) (*Result, error) {
	z := readyFull
	if cfg.Short {
		z = readyShort
	}
	port, err := devstack.FreePort()
	if err != nil {
		return nil, err
	}
	ledgerAddr := fmt.Sprintf("127.0.0.1:%d", port)
	tap, err := startReadyzTap(ledgerAddr)
	if err != nil {
		return nil, err
	}
	defer tap.srv.Close()
	r, err := startRigWith(ctx, cfg, Auth{}, stack.Options{LedgerAddr: ledgerAddr, ProxyLedgerURL: tap.url})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	spec := verify.VoucherSpec{Code: verify.NewCode("ready"), Stock: 10, PerUser: 1}
	if err := r.bench.CreateVoucher(ctx, spec); err != nil {
		return nil, err
	}
	client := clientFrom("", z.Workers)
	order := spec.Code + "-o1"
	if a, err := call(ctx, client, http.MethodPost, load.ReserveURL(r.st.ProxyURL, spec.Code), "", reserveBody(order, 1)); err != nil || a.Status != http.StatusCreated {
		return nil, fmt.Errorf("the order to read: %v %v", a, err)
	}

	tap.slow.Store(true)
	before, start := tap.readyz.Load(), time.Now()
	cheap := openFlood(ctx, client, r.st.ProxyURL, z)
	took := time.Since(start)
	calls := tap.readyz.Load() - before
	tap.slow.Store(false)

	real := statusCount{}
	for range z.Real {
		a, err := call(ctx, client, http.MethodGet, r.st.ProxyURL+api.ReservationsPath(spec.Code)+"/"+order, "", nil)
		if err != nil {
			real["error"]++
			continue
		}
		real[a.String()]++
	}
	res := &Result{Scenario: "readyflood"}
	res.figure("open requests (/readyz, /healthz, /metrics) for %v from %d clients flat out, the ledger's /readyz taking %v: %v",
		took.Round(time.Millisecond), z.Workers, readySlow, cheap)
	res.figure("ledger /readyz calls during the flood: %d; real traffic after it (GET of an order): %v", calls, real)
	most := int64(3 + 3*took.Seconds())
	res.want("the flood reaches the ledger a few times a second at most", calls <= most,
		"%d ledger /readyz calls in %v (at most %d)", calls, took.Round(time.Millisecond), most)
	got503 := 0
	for k, n := range real {
		if len(k) >= 3 && k[:3] == "503" || k == "error" {
			got503 += n
		}
	}
	res.want("real traffic's 503s once the ledger answers again: 0", got503 == 0 && real["200"] == z.Real,
		"%v", real)
	return res.finish(), nil
}

// openFlood sends requests to the open routes from z.Workers clients flat
// out for z.For and counts the answers.
func openFlood(ctx context.Context, client *http.Client, proxyURL string, z readyFlood) statusCount {
	paths := []string{api.ReadyzPath, api.ReadyzPath, api.HealthzPath, api.MetricsPath}
	var next atomic.Int64
	var mu sync.Mutex
	got := statusCount{}
	var wg sync.WaitGroup
	end := time.Now().Add(z.For)
	for range z.Workers {
		wg.Go(func() {
			for i := next.Add(1); time.Now().Before(end) && ctx.Err() == nil; i = next.Add(1) {
				a, err := call(ctx, client, http.MethodGet, proxyURL+paths[i%int64(len(paths))], "", nil)
				k := a.String()
				if err != nil {
					k = "error"
				}
				mu.Lock()
				got[k]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return got
}

// startRigWith is startRig with stack options of its own (addresses, the
// proxy's view of the ledger) beside a's credentials and env.
func startRigWith(ctx context.Context, cfg Config, a Auth, o stack.Options) (*rig, error) {
	lenv, penv := a.env()
	o.BinDir, o.Token, o.ServiceLog = cfg.BinDir, adminToken, cfg.ServiceLog
	if a.LedgerTokens != "" {
		o.Token = ""
	}
	o.LedgerEnv, o.ProxyEnv = append(lenv, o.LedgerEnv...), append(penv, o.ProxyEnv...)
	st, err := stack.Start(o)
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
