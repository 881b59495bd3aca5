package compare

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// wrkPath prepares one of compare's paths for a wrk run: a fresh voucher in
// the state the path needs, and the script that drives it, with the voucher's
// code (empty for the ceiling). A path without an entry in wrkPaths is
// measured by vegeta only.
type wrkPath func(ctx context.Context, b *verify.Bench) (wrkScript, string, error)

// wrkPaths are the paths the wrk table measures, by name (see allPaths).
var wrkPaths = map[string]wrkPath{
	pathCeiling: func(context.Context, *verify.Bench) (wrkScript, string, error) {
		return constantRequest(api.ReservationsPath("CEILING"), wrkBody(3, "wrk-ceiling-1")), "", nil
	},
	pathSoldOut:    wrkSoldOut,
	pathGate:       wrkGate,
	pathGateNoCo:   wrkGate,
	pathFlash:      wrkFresh(true, ""),
	pathFlashLog:   wrkFresh(true, voucher.WritePathLog),
	pathNoCoalesce: wrkFresh(true, ""),
	pathStandard:   wrkFresh(false, ""),
	pathSolution1:  wrkFresh(false, ""),
}

func wrkBody(customer int64, order string) string {
	return fmt.Sprintf(`{"customerId":%d,"orderId":%q,"orderAmount":%d}`, customer, order, load.OrderAmount)
}

// wrkSoldOut: a flash voucher whose one use is taken; the next refusal set
// the proxy's sold-out flag.
func wrkSoldOut(ctx context.Context, b *verify.Bench) (wrkScript, string, error) {
	code := verify.NewCode("wrk-soldout")
	if err := createVoucherRetrying(ctx, b, verify.VoucherSpec{Code: code, Stock: 1, PerUser: 1, Flash: true}); err != nil {
		return "", "", err
	}
	for i, want := range []int{http.StatusCreated, http.StatusConflict} {
		if err := reserveOnce(ctx, b, code, int64(i+1), fmt.Sprintf("%s-%d", code, i), want); err != nil {
			return "", "", err
		}
	}
	return constantRequest(api.ReservationsPath(code), wrkBody(3, code+"-x")), code, nil
}

// wrkGate: a flash voucher with stock, 100 customers at their limit of one;
// each request is a new order of one of them, refused by the Redis script.
func wrkGate(ctx context.Context, b *verify.Bench) (wrkScript, string, error) {
	code := verify.NewCode("wrk-gate")
	if err := createVoucherRetrying(ctx, b, verify.VoucherSpec{Code: code, Stock: 1_000_000, PerUser: 1, Flash: true}); err != nil {
		return "", "", err
	}
	var bodies []string
	for c := int64(1); c <= 100; c++ {
		if err := reserveOnce(ctx, b, code, c, fmt.Sprintf("%s-h%d", code, c), http.StatusCreated); err != nil {
			return "", "", err
		}
		bodies = append(bodies, wrkBody(c, fmt.Sprintf("%s-g%d", code, c)))
	}
	return cycledRequests(api.ReservationsPath(code), bodies), code, nil
}

// wrkFresh: a voucher (flash or standard, with writePath, empty for the
// default) with stock for every request; each request is a new order of a
// new customer, admitted and written (for a log voucher: admitted and
// produced, written behind).
func wrkFresh(flash bool, writePath string) wrkPath {
	return func(ctx context.Context, b *verify.Bench) (wrkScript, string, error) {
		code := verify.NewCode("wrk-write")
		spec := verify.VoucherSpec{Code: code, Stock: 50_000_000, PerUser: 1, Flash: flash, WritePath: writePath}
		if err := createVoucherRetrying(ctx, b, spec); err != nil {
			return "", "", err
		}
		return freshOrders(api.ReservationsPath(code), code+"-", 0, load.OrderAmount), code, nil
	}
}

// createVoucherRetrying is CreateVoucher, retried when the ledger answers 503
// (a busy machine): a retry that finds the voucher created by the attempt
// that timed out (409) is a success.
func createVoucherRetrying(ctx context.Context, b *verify.Bench, v verify.VoucherSpec) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = b.CreateVoucher(ctx, v)
		switch {
		case err == nil:
			return nil
		case attempt > 0 && voucher.ErrorCode(err) == voucher.CodeVoucherExists:
			if !v.Flash { // the attempt that timed out created it
				return nil
			}
			return b.Warmup(ctx, v.Code)
		case voucher.ErrorCode(err) != voucher.CodeUnavailable:
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// reserveOnce sends one reserve to b.URL and expects want. A 503 is retried
// with the same orderId (always safe), a few times: a busy machine may shed
// or time out one of the set-up requests.
func reserveOnce(ctx context.Context, b *verify.Bench, code string, customer int64, order string, want int) error {
	for attempt := 0; ; attempt++ {
		status, raw, err := postReserve(ctx, b, code, customer, order)
		switch {
		case err == nil && status == want:
			return nil
		case (err != nil || status == http.StatusServiceUnavailable) && attempt < 5:
			time.Sleep(200 * time.Millisecond)
		case err != nil:
			return err
		default:
			return fmt.Errorf("reserve %s/%s: %d %s, want %d", code, order, status, bytes.TrimSpace(raw), want)
		}
	}
}

func postReserve(ctx context.Context, b *verify.Bench, code string, customer int64, order string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+api.ReservationsPath(code),
		strings.NewReader(wrkBody(customer, order)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := wrkHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, raw, nil
}

// proxyCounts are the counters of a proxy's /metrics a wrk run reads.
type proxyCounts struct {
	faults                  int64   // requests answered 503: admission faults and shed requests
	batchClaims, batchCalls float64 // claims sent in the gate's script calls, and the calls
}

// serviceCounts reads a proxy's counters. A server without them (ceiling,
// solution1) reads 0.
func serviceCounts(ctx context.Context, url string) proxyCounts {
	var n proxyCounts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+api.MetricsPath, nil)
	if err != nil {
		return n
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return n
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case strings.HasPrefix(line, `flashgate_reserve_total{result="UNAVAILABLE"}`),
			strings.HasPrefix(line, "flashgate_http_shed_total "):
			n.faults += int64(v)
		case strings.HasPrefix(line, "flashgate_gate_batch_size_sum"):
			n.batchClaims += v
		case strings.HasPrefix(line, "flashgate_gate_batch_size_count"):
			n.batchCalls += v
		}
	}
	return n
}

// WrkPathResult is one path of the wrk table.
type WrkPathResult struct {
	Name   string  `json:"name"`
	Note   string  `json:"note"`
	Max    WrkRun  `json:"max"`            // the best of the rounds, flat out
	At80   *WrkRun `json:"at80,omitempty"` // rate-limited to about 80% of Max
	Ratio  float64 `json:"ratioToCeiling,omitempty"`
	Faults int64   `json:"faults"` // 503s the service counted during the runs
	// Drain is, for a log path, the longest wait after one of its runs
	// until Postgres held every order answered 201 (the next run waits for
	// it, so that no path is measured beside another's backlog).
	Drain float64 `json:"drainSeconds,omitempty"`
	// CPUPerRequestUs is each process's CPU per request over the flat-out
	// runs, in microseconds, with their sum under "all" (on a log path, until
	// Postgres held every 201: the consumer's work included); CPURatio is
	// that sum's ratio to the ceiling's.
	CPUPerRequestUs map[string]float64 `json:"cpuPerRequestUs,omitempty"`
	CPURatio        float64            `json:"cpuRatio,omitempty"`
	// GateBatch is the claims per reserve script call over the flat-out
	// runs (the proxy's flashgate_gate_batch_size), the batch the floor's
	// figures are read at.
	GateBatch float64 `json:"gateBatchMean,omitempty"`

	cpu                   cpuWindow
	gateClaims, gateCalls float64
}

// WrkReport is the wrk table of a compare run.
type WrkReport struct {
	Conns    int              `json:"connections"`
	Seconds  float64          `json:"secondsPerRun"`
	Rounds   int              `json:"rounds"`
	Paths    []*WrkPathResult `json:"paths"`
	Sale     *WrkSale         `json:"sale,omitempty"`
	LogSale  *WrkLogSale      `json:"logSale,omitempty"`
	Durable  bool             `json:"durable"`
	Warnings []string         `json:"warnings,omitempty"`
}

// WrkSale is the 1,000-use sale sent by wrk at a high rate, for commits per
// admitted reservation.
type WrkSale struct {
	Rate     float64         `json:"rate"`
	Admitted int             `json:"admitted"`
	Commits  *verify.Commits `json:"commits"`
}

func (r *WrkReport) path(name string) *WrkPathResult {
	for _, p := range r.Paths {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// wrkCompare measures every path that has a wrkPath: rounds of one flat-out
// run per path in turn (the best counts), then each path at about 80% of its
// best, then the sale at SaleRate.
func (c *comparer) wrkCompare(ctx context.Context, paths []string, b *verify.Bench) (*WrkReport, error) {
	cfg := c.cfg.Wrk
	rep := &WrkReport{Conns: cfg.Conns, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Durable: c.cfg.Durable}
	for _, p := range paths {
		if wrkPaths[p] != nil {
			rep.Paths = append(rep.Paths, &WrkPathResult{Name: p, Note: pathNotes[p]})
		}
	}
	fmt.Fprintf(c.log, "wrk: %d connections, one thread, %s per run, %d rounds\n", cfg.Conns, cfg.Duration, cfg.Rounds)
	for round := 1; round <= cfg.Rounds; round++ {
		for _, p := range rep.Paths {
			r, err := c.wrkRun(ctx, p, cfg.Conns, 0)
			if err != nil {
				return rep, err
			}
			fmt.Fprintf(c.log, "  round %d %-22s %8.0f/s  p50 %6.2fms  p99 %7.2fms  non-2xx %d  socket errors %d\n",
				round, p.Name, r.Rate, r.P50Ms, r.P99Ms, r.Non2xx, r.SocketErrs)
			if r.Rate > p.Max.Rate {
				p.Max = r
			}
		}
	}
	for _, p := range rep.Paths {
		if err := c.wrkAt80(ctx, p); err != nil {
			return rep, err
		}
	}
	if ceil := rep.path(pathCeiling); ceil != nil && ceil.Max.Rate > 0 {
		for _, p := range rep.Paths {
			p.Ratio = p.Max.Rate / ceil.Max.Rate
		}
	}
	rep.cpuFigures()
	if cfg.SaleRate > 0 {
		s, err := c.wrkSale(ctx, b, cfg.SaleRate)
		if err != nil {
			return rep, err
		}
		rep.Sale = s
	}
	if p := rep.path(pathFlashLog); p != nil && cfg.LogSale > 0 {
		s, err := c.wrkLogSale(ctx, c.benches[pathFlashLog], p.Max.Rate)
		if err != nil {
			return rep, err
		}
		rep.LogSale = s
	}
	return rep, nil
}

// wrkAt80 runs p at about 80% of its best rate: the delay and connections
// are sized from the latency seen at the maximum, then corrected once from
// the rate achieved.
func (c *comparer) wrkAt80(ctx context.Context, p *WrkPathResult) error {
	target := 0.8 * p.Max.Rate
	conns, delay := atRate(target, max(1, p.Max.P50Ms))
	limit := 4 * c.cfg.Wrk.Conns // past this, wrk's own timers are what is measured
	var r WrkRun
	for try := 0; try < 3; try++ {
		var err error
		if r, err = c.wrkRun(ctx, p, conns, delay); err != nil {
			return err
		}
		if r.Rate <= 0 || (r.Rate >= 0.75*p.Max.Rate && r.Rate <= 0.85*p.Max.Rate) {
			break
		}
		conns = min(limit, max(1, int(float64(conns)*target/r.Rate+0.5)))
	}
	fmt.Fprintf(c.log, "  80%%     %-22s %8.0f/s  p50 %6.2fms  p99 %7.2fms  (%d connections, %d ms apart)\n",
		p.Name, r.Rate, r.P50Ms, r.P99Ms, r.Connections, delay)
	p.At80 = &r
	return nil
}

// wrkRun prepares a fresh voucher for p, warms it up briefly and runs wrk.
// On the log path it then waits until Postgres holds every order answered
// 201 (Drain).
func (c *comparer) wrkRun(ctx context.Context, p *WrkPathResult, conns, delayMs int) (WrkRun, error) {
	b := c.benches[p.Name]
	script, warmCode, err := wrkPaths[p.Name](ctx, b)
	if err != nil {
		return WrkRun{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	warm, err := runWrk(ctx, b.URL, script.withDelay(delayMs), conns, time.Second)
	if err != nil {
		return WrkRun{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	// The warm-up's orders are written before the measured run starts, so
	// that its CPU is the measured run's alone.
	if err := c.waitWritten(ctx, p, warmCode, warm); err != nil {
		return WrkRun{}, err
	}
	script, code, err := wrkPaths[p.Name](ctx, b)
	if err != nil {
		return WrkRun{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	before := serviceCounts(ctx, b.URL)
	cpu0 := load.ReadProcTimes(c.procs())
	r, err := runWrk(ctx, b.URL, script.withDelay(delayMs), conns, c.cfg.Wrk.Duration)
	if err != nil {
		return r, fmt.Errorf("%s: %w", p.Name, err)
	}
	start := time.Now()
	if err := c.waitWritten(ctx, p, code, r); err != nil {
		return r, err
	}
	if p.Name == pathFlashLog {
		p.Drain = max(p.Drain, time.Since(start).Seconds())
	}
	used := load.ReadProcTimes(c.procs()).Since(cpu0)
	used[wrkProc] = r.cpu
	r.DelayMs = delayMs
	if delayMs == 0 { // the flat-out runs: the path at its maximum
		p.cpu.add(used, r.Requests)
	}
	after := serviceCounts(ctx, b.URL)
	p.Faults += after.faults - before.faults
	if delayMs == 0 {
		p.gateClaims += after.batchClaims - before.batchClaims
		p.gateCalls += after.batchCalls - before.batchCalls
	}
	c.pause(ctx)
	return r, nil
}

// waitWritten waits, on a log path, until Postgres holds every order of
// code that run answered 201.
func (c *comparer) waitWritten(ctx context.Context, p *WrkPathResult, code string, run WrkRun) error {
	if p.Name != pathFlashLog {
		return nil
	}
	if _, err := c.benches[p.Name].WaitUsed(ctx, code, int(run.Requests-run.Non2xx), logWriteWait); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

// cpuFigures sets each path's CPU per request and its ratio to the
// ceiling's.
func (r *WrkReport) cpuFigures() {
	for _, p := range r.Paths {
		p.CPUPerRequestUs = p.cpu.perRequest()
		if p.gateCalls > 0 {
			p.GateBatch = p.gateClaims / p.gateCalls
		}
	}
	if ceil := r.path(pathCeiling); ceil != nil {
		for _, p := range r.Paths {
			p.CPURatio = cpuRatio(p.CPUPerRequestUs, ceil.CPUPerRequestUs)
		}
	}
}

// logWriteWait is how long a log path's run waits for the consumer to write
// every order answered 201.
const logWriteWait = 2 * time.Minute

// wrkSale sells a fresh 1,000-use flash voucher to new customers at about
// rate and reports the Postgres commits per admitted reservation.
func (c *comparer) wrkSale(ctx context.Context, b *verify.Bench, rate float64) (*WrkSale, error) {
	code := verify.NewCode("wrk-sale")
	if err := createVoucherRetrying(ctx, b, verify.VoucherSpec{Code: code, Stock: c.cfg.Sale.Stock, PerUser: 1, Flash: true}); err != nil {
		return nil, err
	}
	before, err := b.Commits(ctx)
	if err != nil {
		return nil, err
	}
	// An answer takes about 10 ms while the uses sell (each is written), so
	// that many connections keep rate requests a second coming.
	conns, delay := atRate(rate, 10)
	script := freshOrders(api.ReservationsPath(code), code+"-", 0, load.OrderAmount).withDelay(delay)
	r, err := runWrk(ctx, b.URL, script, conns, time.Second)
	if err != nil {
		return nil, fmt.Errorf("sale: %w", err)
	}
	d, err := b.DBState(ctx, code)
	if err != nil {
		return nil, err
	}
	commits, err := b.CommitsSince(ctx, before, c.cfg.Sale.StatsWait, d.Used)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.log, "wrk sale: %d uses at %.0f/s (%d connections): %d admitted, %d commits = %.3f per admitted\n",
		c.cfg.Sale.Stock, r.Rate, conns, d.Used, commits.Delta, commits.PerAdmitted)
	return &WrkSale{Rate: r.Rate, Admitted: d.Used, Commits: commits}, nil
}

// wrkHTTP is the client of the wrk table's setup and checks (a few requests,
// not the load: wrk sends that).
var wrkHTTP = &http.Client{Timeout: 30 * time.Second}
