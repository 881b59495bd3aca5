package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// readerToken is the exports attack's token: scope read, all an export needs.
const readerToken = "attack-reader"

var exportsAuth = Auth{LedgerTokens: "admin:" + adminToken + ",reader:" + readerToken + ":read"}

// exportMax is the ledger's EXPORT_MAX the attack runs against (its default).
const exportMax = 2

// runExports has 40 readers with a read token each start the CSV export of a
// voucher whose export is larger than the sockets' buffers and read none of
// it, while real customers reserve a standard voucher through the proxy:
// the customers are served within 1 s at p99, the exports over EXPORT_MAX
// are refused at once (429 with Retry-After), and the stalled exports'
// transactions (their snapshots) end by EXPORT_TIMEOUT.
func runExports(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: "exports"}
	readers, rows, reserves, timeout := 40, 300_000, 500, 10*time.Second
	if cfg.Short {
		rows, reserves, timeout = 150_000, 150, 5*time.Second
	}
	r, err := startRig(ctx, cfg, exportsAuth, []string{"EXPORT_TIMEOUT=" + timeout.String()}, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	big := verify.VoucherSpec{Code: verify.NewCode("export"), Stock: 10, PerUser: 1}
	shop := verify.VoucherSpec{Code: verify.NewCode("shop"), Stock: reserves + 10, PerUser: 1}
	for _, v := range []verify.VoucherSpec{big, shop} {
		if err := r.bench.CreateVoucher(ctx, v); err != nil {
			return nil, err
		}
	}
	if err := r.bench.SeedReservations(ctx, big.Code, rows); err != nil {
		return nil, err
	}
	began := time.Now()
	statuses, retryAfter, stalled := stallExports(ctx, r.st.LedgerURL+api.Fill(api.RouteExport, big.Code), readers)
	defer func() {
		for _, c := range stalled {
			c.Close()
		}
	}()
	held, err := r.bench.ExportSessions(ctx)
	if err != nil {
		return nil, err
	}
	lat, failed := reserveStream(ctx, r.st.ProxyURL, shop.Code, reserves, 50)
	ended, err := waitExportsEnd(ctx, r.bench, timeout+20*time.Second)
	if err != nil {
		return nil, err
	}
	sinceStart := time.Since(began)
	p99 := load.Percentile(lat, 99)
	res.figure("%d stalled readers of a %d-row export (EXPORT_MAX %d, EXPORT_TIMEOUT %s): %s; %d export sessions in a transaction",
		readers, rows, exportMax, timeout, statuses, held)
	res.figure("%d reserves of a standard voucher through the proxy at 50/s beside them: p50 %s, p99 %s, max %s; %s",
		len(lat), load.Percentile(lat, 50).Round(time.Millisecond), p99.Round(time.Millisecond),
		load.Percentile(lat, 100).Round(time.Millisecond), failed)
	res.want("a standard voucher's reserves within 1 s p99 beside stalled exports", p99 <= time.Second && failed.onlyCreated(),
		"p99 %s, answers %s", p99.Round(time.Millisecond), failed)
	refused := readers - statuses["200"]
	res.want("the exports over EXPORT_MAX are 429 RATE_LIMITED with Retry-After",
		statuses["200"] <= exportMax && statuses["429 RATE_LIMITED"] == refused && retryAfter == refused,
		"%s; %d of the refusals with Retry-After", statuses, retryAfter)
	res.want("the stalled exports' transactions end by EXPORT_TIMEOUT", ended && sinceStart < timeout+10*time.Second,
		"none left %s after the exports began (EXPORT_TIMEOUT %s)", sinceStart.Round(100*time.Millisecond), timeout)
	return res.finish(), nil
}

// stallExports starts n exports of url, each on a connection of its own, and
// reads none of the ones answered 200: they are returned to close. The
// refusals are read whole and counted by status and code.
func stallExports(ctx context.Context, url string, n int) (statuses statusCount, retryAfter int, stalled []io.Closer) {
	statuses = statusCount{}
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			statuses["error"]++
			continue
		}
		req.Header.Set("Authorization", "Bearer "+readerToken)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		if err != nil {
			statuses["error"]++
			continue
		}
		if resp.StatusCode == http.StatusOK {
			statuses["200"]++
			stalled = append(stalled, resp.Body)
			continue
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		statuses[answer{Status: resp.StatusCode, Code: jsonError(raw)}.String()]++
		if resp.Header.Get(api.HeaderRetryAfter) != "" {
			retryAfter++
		}
	}
	return statuses, retryAfter, stalled
}

// waitExportsEnd waits until no export session holds a transaction, for at
// most within; ok says whether it came to that.
func waitExportsEnd(ctx context.Context, b *verify.Bench, within time.Duration) (ok bool, err error) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, err := b.ExportSessions(ctx)
		if err != nil || n == 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// answers counts a stream's answers by "status CODE".
type answers statusCount

func (a answers) String() string { return statusCount(a).String() }

// onlyCreated says whether every answer was a 201.
func (a answers) onlyCreated() bool {
	for k, n := range a {
		if k != "201" && n > 0 {
			return false
		}
	}
	return len(a) > 0
}

// reserveStream sends n reserves of code through the proxy at rate a
// second, each a customer and order of its own, and returns their latencies
// (sorted) and their answers.
func reserveStream(ctx context.Context, proxy, code string, n, rate int) ([]time.Duration, answers) {
	client := clientFrom("", 64)
	var (
		mu  sync.Mutex
		lat []time.Duration
		got = answers{}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			a, err := call(ctx, client, http.MethodPost, proxy+api.ReservationsPath(code), "",
				reserveBody(fmt.Sprintf("%s-r%d", code, i), int64(i+1)))
			took := time.Since(sent)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, took)
			if err != nil {
				got["error"]++
				return
			}
			got[a.String()]++
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, got
}
