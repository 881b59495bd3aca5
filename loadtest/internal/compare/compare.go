// Package compare measures the paths side by side: each one's maximum
// sustainable rate and its latency at one fixed rate (the `compare` command),
// wrk's closed-loop table, and the servers it measures the proxy against: the
// bare HTTP ceiling (`ceiling`) and the article's one-transaction-per-
// reservation server (`solution1`).
package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/burst"
	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The paths compare measures, in the order it measures them.
const (
	pathCeiling    = "ceiling"
	pathStandard   = "standard"
	pathNoCoalesce = "flash-nocoalesce"
	pathFlash      = "flash"
	pathFlashLog   = "flash-log"
	pathSoldOut    = "sold-out"
	pathGate       = "flash-gate"
	pathGateNoCo   = "flash-gate-nocoalesce"
	pathNoEvents   = "flash-noevents"
	pathSolution1  = "solution1"
)

// allPaths are the paths compared, in the order they are measured.
//
// A path is registered in four places, all in this file and wrkcompare.go:
// its name here and in allPaths (the order it is measured in), its note in
// pathNotes, the traffic vegeta sends it in comparer.shape, the server it goes
// to in comparer.openPaths (the stack's proxy unless set there), and, to be in
// the wrk table, how wrk drives it in wrkPaths.
var allPaths = []string{pathCeiling, pathStandard, pathSolution1, pathNoCoalesce, pathFlash, pathFlashLog, pathNoEvents, pathGateNoCo, pathGate, pathSoldOut}

var pathNotes = map[string]string{
	pathCeiling:    "bare gin: bind + validate the body, fixed 409 (own process)",
	pathStandard:   "flashSale false: proxy -> ledger guarded UPDATE per request",
	pathNoCoalesce: "flash, PROXY_COALESCE=off: one Redis script call per request, then ledger",
	pathFlash:      "flash, coalesced Redis script calls, ledger group commit",
	pathFlashLog:   "flash, writePath log (Approach B): coalesced Redis script calls, the admission produced to Kafka (kfake, in the loadtest process) and answered on its ack; the ledger's consumer writes Postgres behind",
	pathSoldOut:    "flash voucher with 0 uses left: sold-out flag / Redis refusal",
	pathGate:       "flash, coalesced: 100 customers at their limit, refused by the Redis script (no DB write, no sold-out flag)",
	pathGateNoCo:   "the same with PROXY_COALESCE=off: one Redis script call per request",
	pathNoEvents:   "flash as above through a proxy and a ledger with EVENTS=off: the write path without the outbox's events",
	pathSolution1:  "the article's Solution 1: one transaction per reservation (guarded UPDATE + INSERT), no proxy, same Postgres",
}

// Config is one compare run.
type Config struct {
	Ladder       verify.Ladder
	StepDuration time.Duration
	FixedRate    float64
	Retry        float64
	Pause        time.Duration // between bursts, to let the stack drain
	Warmup       time.Duration // an unmeasured burst at the start rate before each path's ladder
	Recheck      int           // reruns of a step that was not sustained before the ladder stops
	Paths        []string
	Sustain      verify.Sustain
	Attack       load.AttackOptions
	Sale         burst.Config // the 1,000-use burst that measures commits per admitted
	Durable      bool         // Postgres with fsync and full_page_writes on
	Wrk          WrkConfig
}

// WrkConfig is the wrk table of a compare run.
type WrkConfig struct {
	Generator string        // wrk, vegeta or auto (wrk when installed)
	Conns     int           // connections of a flat-out run
	Duration  time.Duration // of each measured run
	Rounds    int           // flat-out runs per path, in turns; the best counts
	SaleRate  float64       // the 1,000-use sale sent by wrk at this rate (0: skip)
	LogSale   int           // uses of the flash-log sale sent by wrk flat out, with the consumer's lag (0: skip)
}

// StepResult is one burst of a compare run, in short.
type StepResult struct {
	Rate       float64      `json:"rate"`
	Achieved   float64      `json:"achievedRate"`
	P50Ms      float64      `json:"p50Ms"`
	P99Ms      float64      `json:"p99Ms"`
	P999Ms     float64      `json:"p999Ms"`
	ErrorRate  float64      `json:"errorRate"`
	Admitted   int          `json:"admittedOrders"`
	Sustained  bool         `json:"sustained"`
	Why        string       `json:"why,omitempty"` // why it was not sustained
	Invariants string       `json:"invariants"`    // PASS, FAIL or n/a
	Failed     []string     `json:"failedInvariants,omitempty"`
	Code       string       `json:"code,omitempty"`
	CPU        *load.CPUUse `json:"cpu,omitempty"`
}

// PathResult is everything measured on one path.
type PathResult struct {
	Name    string       `json:"name"`
	Note    string       `json:"note"`
	Warmup  *StepResult  `json:"warmup,omitempty"`
	MaxRate float64      `json:"maxSustainableRate"`
	AtMax   *StepResult  `json:"atMax,omitempty"`
	Fixed   *StepResult  `json:"atFixedRate,omitempty"`
	Steps   []StepResult `json:"steps"`
	Ratio   float64      `json:"ratioToCeiling,omitempty"`
	// CPUPerRequestUs is each process's CPU per request at the maximum, in
	// microseconds, with their sum under "all"; CPURatio is that sum's ratio
	// to the ceiling's.
	CPUPerRequestUs map[string]float64 `json:"cpuPerRequestUs,omitempty"`
	CPURatio        float64            `json:"cpuRatio,omitempty"`
}

func stepOf(s *verify.Summary, sus verify.Sustain) StepResult {
	r := StepResult{Rate: s.RequestedRate, Achieved: s.AchievedRate, P50Ms: s.All.P50, P99Ms: s.All.P99,
		P999Ms: s.All.P999, ErrorRate: s.ErrorRate, Admitted: s.AdmittedOrders, Invariants: "n/a", Code: s.Code, CPU: s.CPU}
	r.Sustained, r.Why = sus.Judge(s)
	if len(s.Checks) > 0 {
		r.Invariants = verify.Verdict(s.Pass)
		for _, c := range s.Checks {
			if !c.Pass {
				r.Failed = append(r.Failed, c.Name+": "+c.Detail)
			}
		}
	}
	return r
}

// comparer runs the bursts of one compare.
type comparer struct {
	cfg     Config
	benches map[string]*verify.Bench
	log     io.Writer
	failed  []string          // invariant failures, "path at rate: name"
	procs   func() load.Procs // the processes of this run, for their CPU
}

// shape is the burst a path gets at rate: a fresh voucher with enough uses that
// the flash and standard paths admit every order (stock = requests, one order
// per customer), or none at all for the sold-out path.
func (c *comparer) shape(path string, rate float64, d time.Duration) burst.Config {
	b := burst.Config{Label: path, Rate: rate, Duration: d, PerUser: 1, Retry: c.cfg.Retry,
		Flash: path != pathStandard && path != pathSolution1, Seed: uint64(rate), Attack: c.cfg.Attack, Procs: c.procs}
	b.Stock = b.Requests()
	b.Customers = b.Requests()
	switch path {
	case pathFlashLog:
		b.WritePath = voucher.WritePathLog
	case pathSoldOut:
		b.Stock = 0
	case pathGate, pathGateNoCo:
		// Every request reaches the reserve script, and all but the first
		// 100 are refused there: the edge's own cost, without the database.
		b.Customers = min(100, b.Requests())
	}
	return b
}

// burst runs one burst on path and records invariant failures.
func (c *comparer) burst(ctx context.Context, path string, cfg burst.Config) (*verify.Summary, StepResult, error) {
	s, err := burst.Send(ctx, c.benches[path], cfg)
	if err != nil {
		return nil, StepResult{}, fmt.Errorf("%s at %.0f/s: %w", path, cfg.Rate, err)
	}
	r := stepOf(s, c.cfg.Sustain)
	for _, f := range r.Failed {
		c.failed = append(c.failed, fmt.Sprintf("%s at %.0f/s (%s): %s", path, cfg.Rate, s.Code, f))
	}
	status := "sustained"
	if !r.Sustained {
		status = "NOT sustained: " + r.Why
	}
	if len(s.ErrorSamples) > 0 {
		status += " [" + strings.Join(s.ErrorSamples, "; ") + "]"
	}
	cpu := ""
	if u := s.CPU; u != nil {
		cpu = fmt.Sprintf(", cpu gen/stack/other %.2f/%.2f/%.2f", u.GeneratorCores, u.StackCores, u.OtherCores)
	}
	fmt.Fprintf(c.log, "  %-16s %7.0f/s: achieved %7.0f/s, p50 %6.2fms, p99 %8.2fms, errors %5.2f%%, admitted %6d%s, invariants %s -> %s\n",
		cfg.Label, cfg.Rate, r.Achieved, r.P50Ms, r.P99Ms, 100*r.ErrorRate, r.Admitted, cpu, r.Invariants, status)
	c.pause(ctx)
	return s, r, nil
}

func (c *comparer) pause(ctx context.Context) {
	select {
	case <-time.After(c.cfg.Pause):
	case <-ctx.Done():
	}
}

// step runs path at rate until it is sustained or out of rechecks: on a
// shared machine one stall can spoil a short step's p99, so a step that misses
// the bar is run again before it counts as failed. Every run is reported. An
// invariant failure is final.
func (c *comparer) step(ctx context.Context, pr *PathResult, rate float64) (bool, error) {
	for attempt := 0; ; attempt++ {
		_, r, err := c.burst(ctx, pr.Name, c.shape(pr.Name, rate, c.cfg.StepDuration))
		if err != nil {
			return false, err
		}
		pr.Steps = append(pr.Steps, r)
		if r.Sustained || attempt >= c.cfg.Recheck || r.Invariants == "FAIL" {
			return r.Sustained, nil
		}
	}
}

// measureAll finds each path's maximum sustainable rate and then runs every
// path at the fixed rate. The ladders take turns, one step per path per round,
// so that whatever else the machine is doing meanwhile falls on all paths
// alike instead of on whichever path happened to run then: the targets are
// ratios between paths.
func (c *comparer) measureAll(ctx context.Context, paths []string) ([]*PathResult, error) {
	var prs []*PathResult
	climbs := map[string]*verify.Climb{}
	for _, p := range paths {
		pr := &PathResult{Name: p, Note: pathNotes[p]}
		prs = append(prs, pr)
		climbs[p] = c.cfg.Ladder.Begin()
		fmt.Fprintf(c.log, "%s: %s\n", p, pr.Note)
		if c.cfg.Warmup > 0 {
			// Connections, pools and caches fill here rather than in the first step.
			w := c.shape(p, c.cfg.Ladder.Start, c.cfg.Warmup)
			w.Label = p + " (warm-up)"
			_, r, err := c.burst(ctx, p, w)
			if err != nil {
				return prs, err
			}
			pr.Warmup = &r
		}
	}
	for round := 1; ; round++ {
		active := false
		for _, pr := range prs {
			climb := climbs[pr.Name]
			rate, ok := climb.Next()
			if !ok {
				continue
			}
			if !active {
				fmt.Fprintf(c.log, "round %d:\n", round)
				active = true
			}
			pass, err := c.step(ctx, pr, rate)
			if err != nil {
				return prs, err
			}
			climb.Record(pass)
		}
		if !active {
			break
		}
	}
	for _, pr := range prs {
		pr.MaxRate = climbs[pr.Name].Best()
		for i := range pr.Steps {
			if pr.Steps[i].Rate == pr.MaxRate && pr.Steps[i].Sustained {
				pr.AtMax = &pr.Steps[i]
			}
		}
	}
	if c.cfg.FixedRate > 0 {
		fmt.Fprintf(c.log, "every path at %.0f/s:\n", c.cfg.FixedRate)
		for _, pr := range prs {
			_, r, err := c.burst(ctx, pr.Name, c.shape(pr.Name, c.cfg.FixedRate, c.cfg.StepDuration))
			if err != nil {
				return prs, err
			}
			pr.Fixed = &r
		}
	}
	return prs, nil
}

// compareCmd is `loadtest compare` as its flags ask for it.
type compareCmd struct {
	Config Config
	Out    string // the report directory
	BinDir string
	Token  string
}

// parseCompareFlags reads `loadtest compare`'s flags.
func parseCompareFlags(args []string) (compareCmd, error) {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	c := compareCmd{Config: Config{Sustain: verify.DefaultSustain}}
	cfg := &c.Config
	fs.Float64Var(&cfg.Ladder.Start, "start-rate", 1000, "first rate of each path's ladder, req/s")
	fs.Float64Var(&cfg.Ladder.Factor, "factor", 1.5, "rate multiplier per ladder step")
	fs.Float64Var(&cfg.Ladder.Floor, "floor-rate", 50, "lowest rate a ladder goes down to")
	fs.IntVar(&cfg.Ladder.MaxSteps, "max-steps", 10, "most ladder steps per path")
	fs.DurationVar(&cfg.StepDuration, "step-duration", 2*time.Second, "how long each step sends")
	fs.Float64Var(&cfg.FixedRate, "fixed-rate", 5000, "the common rate every path is also run at (0: skip)")
	fs.Float64Var(&cfg.Retry, "retry", 0.10, "share of requests that resend an earlier orderId")
	fs.DurationVar(&cfg.Pause, "pause", time.Second, "pause between bursts")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured burst at the start rate before each path (0: none)")
	fs.IntVar(&cfg.Recheck, "recheck", 1, "reruns of a step that was not sustained before a ladder stops")
	pathList := fs.String("paths", strings.Join(allPaths, ","), "paths to measure, comma separated: "+strings.Join(allPaths, ","))
	fs.Float64Var(&cfg.Sustain.MaxErrorRate, "max-errors", verify.DefaultSustain.MaxErrorRate, "most failed requests of a sustained step (share)")
	fs.DurationVar(&cfg.Sustain.MaxP99, "max-p99", verify.DefaultSustain.MaxP99, "highest p99 of a sustained step")
	fs.Float64Var(&cfg.Sustain.MinAchieved, "min-achieved", verify.DefaultSustain.MinAchieved, "lowest achieved/requested rate of a sustained step")
	cfg.Sale = burst.Config{Label: "sale", PerUser: 1, Flash: true, Seed: 1}
	fs.Float64Var(&cfg.Sale.Rate, "sale-rate", 5000, "rate of the 1,000-use burst (0: skip it)")
	fs.DurationVar(&cfg.Sale.Duration, "sale-duration", 4*time.Second, "duration of the 1,000-use burst")
	fs.IntVar(&cfg.Sale.Stock, "sale-stock", 1000, "uses of the 1,000-use burst's voucher")
	fs.IntVar(&cfg.Sale.Customers, "sale-customers", 15000, "customers of the 1,000-use burst")
	fs.DurationVar(&cfg.Sale.StatsWait, "stats-wait", 11*time.Second, "wait before reading Postgres commits after the 1,000-use burst")
	load.AttackFlags(fs, &cfg.Attack)
	fs.BoolVar(&cfg.Durable, "durable", false, "Postgres with fsync and full_page_writes on (every 201 durable)")
	fs.StringVar(&cfg.Wrk.Generator, "generator", "auto", "wrk (light, closed model: the table), vegeta (open-model ladders) or auto: wrk when installed")
	fs.IntVar(&cfg.Wrk.Conns, "wrk-conns", 64, "connections of wrk's flat-out runs")
	fs.DurationVar(&cfg.Wrk.Duration, "wrk-duration", 5*time.Second, "length of each measured wrk run")
	fs.IntVar(&cfg.Wrk.Rounds, "wrk-rounds", 2, "flat-out wrk runs per path, in turns (the best counts)")
	fs.Float64Var(&cfg.Wrk.SaleRate, "wrk-sale-rate", commitsTargetRate, "rate of the 1,000-use sale sent by wrk, for commits per admitted (0: skip)")
	fs.IntVar(&cfg.Wrk.LogSale, "wrk-log-sale", 50_000, "uses of the writePath log voucher sold by wrk flat out when flash-log is measured: the consumer's lag and the time until Postgres holds every 201 (0: skip)")
	fs.StringVar(&c.Out, "out", "", "report directory (default loadtest/reports/compare-<timestamp>)")
	fs.StringVar(&c.BinDir, "bin", "", "directory holding ledger and proxy")
	fs.StringVar(&c.Token, "token", "dev-token", "LEDGER_TOKEN of the stack")
	_ = fs.Parse(args)
	cfg.Paths = strings.Split(*pathList, ",")
	for _, p := range cfg.Paths {
		if !slices.Contains(allPaths, p) {
			return c, fmt.Errorf("unknown path %q (want some of %s)", p, strings.Join(allPaths, ","))
		}
	}
	cfg.Sale.Retry, cfg.Sale.Attack = cfg.Retry, cfg.Attack
	switch cfg.Wrk.Generator {
	case "auto":
		cfg.Wrk.Generator = "vegeta"
		if wrkInstalled() {
			cfg.Wrk.Generator = "wrk"
		}
	case "wrk":
		if !wrkInstalled() {
			return c, errors.New("--generator wrk: wrk is not installed (scripts/deps.sh; sudo apt-get install -y wrk)")
		}
	case "vegeta":
	default:
		return c, fmt.Errorf("--generator %q: want wrk, vegeta or auto", cfg.Wrk.Generator)
	}
	if c.Out == "" {
		c.Out = verify.DefaultOut("compare")
	}
	if cfg.Ladder.Factor <= 1 || cfg.Ladder.Start <= 0 || cfg.StepDuration <= 0 {
		return c, errors.New("--start-rate and --step-duration must be positive and --factor above 1")
	}
	return c, nil
}

// Run is `loadtest compare`.
func Run(ctx context.Context, args []string) error {
	cmd, err := parseCompareFlags(args)
	if err != nil {
		return err
	}
	started := time.Now()
	fmt.Println("starting a local stack...")
	st, err := stack.Start(stack.Options{BinDir: cmd.BinDir, Token: cmd.Token, DurablePG: cmd.Config.Durable,
		AdmissionsLog: slices.Contains(cmd.Config.Paths, pathFlashLog)})
	if err != nil {
		return err
	}
	defer st.Stop()
	b, err := verify.OpenBench(ctx, st.Endpoints())
	if err != nil {
		return err
	}
	defer b.Close()
	c := &comparer{cfg: cmd.Config, log: os.Stdout}
	stop, err := c.openPaths(st, b)
	defer stop()
	if err != nil {
		return err
	}
	rep, err := c.run(ctx, b, started, cmd.Out)
	if err != nil {
		return err
	}
	return reportCompare(rep, c.failed, cmd.Out)
}

// openPaths gives each path the Bench its bursts go to, starting what a path
// needs beyond the stack: a proxy without coalescing, the ceiling server,
// the solution1 server.
// stop stops what it started.
func (c *comparer) openPaths(st *stack.Stack, b *verify.Bench) (stop func(), err error) {
	c.benches = map[string]*verify.Bench{pathStandard: b, pathFlash: b, pathFlashLog: b, pathSoldOut: b, pathGate: b}
	servers := map[string]int{}
	c.procs = runProcs(st, servers)
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if slices.Contains(c.cfg.Paths, pathNoCoalesce) || slices.Contains(c.cfg.Paths, pathGateNoCo) {
		url, err := st.StartProxy("proxy-nocoalesce", "PROXY_COALESCE=off")
		if err != nil {
			return stop, err
		}
		c.benches[pathNoCoalesce] = b.WithURL(url)
		c.benches[pathGateNoCo] = b.WithURL(url)
	}
	if slices.Contains(c.cfg.Paths, pathNoEvents) {
		url, err := startNoEvents(st)
		if err != nil {
			return stop, err
		}
		c.benches[pathNoEvents] = b.WithURL(url)
	}
	if slices.Contains(c.cfg.Paths, pathCeiling) {
		ceil, err := startCeiling()
		if err != nil {
			return stop, err
		}
		stops = append(stops, ceil.Stop)
		servers[pathCeiling] = ceil.pid()
		c.benches[pathCeiling] = verify.BareBench(ceil.URL)
	}
	if slices.Contains(c.cfg.Paths, pathSolution1) {
		sol, err := startChild("solution1", "--db", st.DBURL)
		if err != nil {
			return stop, err
		}
		stops = append(stops, sol.Stop)
		servers[pathSolution1] = sol.pid()
		c.benches[pathSolution1] = b.WithURL(sol.URL)
	}
	return stop, nil
}

// run measures every path, flash at 80% of its maximum and the sale; the
// sale's own report goes into out/sale.
func (c *comparer) run(ctx context.Context, b *verify.Bench, started time.Time, out string) (*Report, error) {
	cfg := c.cfg
	rep := &Report{Started: started, CPUs: runtime.NumCPU(), LoadAvg: load.LoadAvg(), StepDuration: cfg.StepDuration.Seconds(),
		FixedRate: cfg.FixedRate, Sustain: fmt.Sprintf("errors <= %.2g%%, p99 <= %s, achieved >= %.0f%% of requested, invariants pass",
			100*cfg.Sustain.MaxErrorRate, cfg.Sustain.MaxP99, 100*cfg.Sustain.MinAchieved)}
	var paths []string // in the order of allPaths
	for _, p := range allPaths {
		if slices.Contains(cfg.Paths, p) {
			paths = append(paths, p)
		}
	}
	rep.Generator, rep.Durable = cfg.Wrk.Generator, cfg.Durable
	var err error
	if cfg.Wrk.Generator == "wrk" {
		if rep.Wrk, err = c.wrkCompare(ctx, paths, b); err != nil {
			return nil, err
		}
	} else if rep.Paths, err = c.measureAll(ctx, paths); err != nil {
		return nil, err
	}
	if flash := rep.path(pathFlash); flash != nil && flash.MaxRate > 0 {
		rate := flash.MaxRate * 0.8
		fmt.Fprintf(c.log, "flash at 80%% of its max (%.0f/s):\n", rate)
		_, r, err := c.burst(ctx, pathFlash, c.shape(pathFlash, rate, cfg.StepDuration))
		if err != nil {
			return nil, err
		}
		rep.Flash80 = &r
	}
	if cfg.Sale.Rate > 0 {
		if rep.Sale, err = c.sale(ctx, b, filepath.Join(out, "sale")); err != nil {
			return nil, err
		}
	}
	rep.finish(cfg)
	rep.Seconds = time.Since(started).Seconds()
	rep.Invariants = len(c.failed) == 0
	return rep, nil
}

// sale runs the 1,000-use burst that measures commits per admitted order and
// writes its report into dir.
func (c *comparer) sale(ctx context.Context, b *verify.Bench, dir string) (*verify.Summary, error) {
	sale := c.cfg.Sale
	sale.Procs = c.procs
	fmt.Fprintf(c.log, "the %d-use sale: %d requests at %.0f/s, %d customers, %.0f%% retries (then %s for Postgres statistics)\n",
		sale.Stock, sale.Requests(), sale.Rate, sale.Customers, 100*sale.Retry, sale.StatsWait)
	s, err := burst.Send(ctx, b, sale)
	if err != nil {
		return nil, fmt.Errorf("sale: %w", err)
	}
	verify.PrintSummary(c.log, s)
	html, _, err := verify.WriteReport(dir, s)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.log, "report:  %s\n", html)
	for _, ch := range s.Checks {
		if !ch.Pass {
			c.failed = append(c.failed, fmt.Sprintf("sale (%s): %s: %s", s.Code, ch.Name, ch.Detail))
		}
	}
	return s, nil
}

// startNoEvents starts a ledger with EVENTS=off (its writes leave the outbox
// empty) and a proxy that writes through it, and returns the proxy's URL: the
// flash path's cost without the events, on the same database and Redis. It
// takes no part in the admissions log (flash-log's consumer stays the stack's
// ledger alone).
func startNoEvents(st *stack.Stack) (string, error) {
	_, ledgerURL, err := st.StartLedger("ledger-noevents", "", "EVENTS=off", "KAFKA_ADMISSIONS_BROKERS=")
	if err != nil {
		return "", err
	}
	_, url, err := st.StartProxyLike("proxy-noevents", "", "LEDGER_URL="+ledgerURL)
	return url, err
}
