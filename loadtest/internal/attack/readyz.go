package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// readyPings is the ledger's count of the pings its /readyz sent to Postgres.
const readyPings = "flashgate_ready_pings_total"

// runLedgerReadyz floods the ledger's /readyz (open, never shed) from 64
// clients at once while customers reserve a standard voucher through the
// proxy: the flood reaches Postgres at most a few times a second, every
// probe is answered ready, and the customers are served.
func runLedgerReadyz(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: "ledger-readyz"}
	flood, reserves := 10*time.Second, 500
	if cfg.Short {
		flood, reserves = 3*time.Second, 150
	}
	r, err := startRig(ctx, cfg, Auth{}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	shop := verify.VoucherSpec{Code: verify.NewCode("shop"), Stock: reserves + 10, PerUser: 1}
	if err := r.bench.CreateVoucher(ctx, shop); err != nil {
		return nil, err
	}
	before, err := r.ledgerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	probes := make(chan statusCount, 1)
	go func() { probes <- floodReadyz(ctx, r.st.LedgerURL+api.ReadyzPath, 64, flood) }()
	lat, got := reserveStream(ctx, r.st.ProxyURL, shop.Code, min(reserves, int(flood.Seconds())*50), 50)
	answered := <-probes
	took := time.Since(began)
	after, err := r.ledgerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	pings := metricSum(after, readyPings) - metricSum(before, readyPings)
	sent := 0
	for _, n := range answered {
		sent += n
	}
	perSecond := pings / took.Seconds()
	p99 := load.Percentile(lat, 99)
	counted := strings.Contains(after, readyPings)
	reached := fmt.Sprintf("%v pings reached Postgres (%.1f/s)", pings, perSecond)
	if !counted {
		reached = "the ledger counts no pings (no " + readyPings + ")"
	}
	res.figure("%d probes of the ledger's /readyz in %s from 64 clients (%.0f/s): %s; %s",
		sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), answered, reached)
	res.figure("%d reserves of a standard voucher through the proxy at 50/s meanwhile: p99 %s; %s", len(lat), p99.Round(time.Millisecond), got)
	res.want("a /readyz flood reaches Postgres at most a few times a second",
		counted && perSecond <= 4, "%s for %d probes", reached, sent)
	res.want("every probe of the flood answered ready", sent > 0 && answered["200"] == sent, "%s", answered)
	res.want("the customers are served beside the flood", got.onlyCreated() && p99 <= time.Second,
		"p99 %s, answers %s", p99.Round(time.Millisecond), got)
	return res.finish(), nil
}

// floodReadyz sends GET url from clients goroutines, each as fast as it is
// answered, for d, and counts the answers by status.
func floodReadyz(ctx context.Context, url string, clients int, d time.Duration) statusCount {
	client := clientFrom("", clients)
	var (
		mu  sync.Mutex
		got = statusCount{}
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				a, err := call(ctx, client, http.MethodGet, url, "", nil)
				mu.Lock()
				if err != nil {
					got["error"]++
				} else {
					got[a.String()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}
