package main

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
)

// The paths compare measures, in the order it measures them.
const (
	pathCeiling    = "ceiling"
	pathStandard   = "standard"
	pathNoCoalesce = "flash-nocoalesce"
	pathFlash      = "flash"
	pathSoldOut    = "sold-out"
	pathGate       = "flash-gate"
	pathGateNoCo   = "flash-gate-nocoalesce"
)

var allPaths = []string{pathCeiling, pathStandard, pathNoCoalesce, pathFlash, pathGateNoCo, pathGate, pathSoldOut}

var pathNotes = map[string]string{
	pathCeiling:    "bare gin: bind + validate the body, fixed 409 (own process)",
	pathStandard:   "flashSale false: proxy -> ledger guarded UPDATE per request",
	pathNoCoalesce: "flash, PROXY_COALESCE=off: one Redis script call per request, then ledger",
	pathFlash:      "flash, coalesced Redis script calls, ledger group commit",
	pathSoldOut:    "flash voucher with 0 uses left: sold-out flag / Redis refusal",
	pathGate:       "flash, coalesced: 100 customers at their limit, refused by the Redis script (no DB write, no sold-out flag)",
	pathGateNoCo:   "the same with PROXY_COALESCE=off: one Redis script call per request",
}

// CompareConfig is one compare run.
type CompareConfig struct {
	Ladder       Ladder
	StepDuration time.Duration
	FixedRate    float64
	Retry        float64
	Pause        time.Duration // between bursts, to let the stack drain
	Warmup       time.Duration // an unmeasured burst at the start rate before each path's ladder
	Recheck      int           // reruns of a step that was not sustained before the ladder stops
	Paths        []string
	Sustain      Sustain
	Attack       AttackOptions
	Sale         BurstConfig // the 1,000-use burst that measures commits per admitted
}

// StepResult is one burst of a compare run, in short.
type StepResult struct {
	Rate       float64  `json:"rate"`
	Achieved   float64  `json:"achievedRate"`
	P50Ms      float64  `json:"p50Ms"`
	P99Ms      float64  `json:"p99Ms"`
	P999Ms     float64  `json:"p999Ms"`
	ErrorRate  float64  `json:"errorRate"`
	Admitted   int      `json:"admittedOrders"`
	Sustained  bool     `json:"sustained"`
	Why        string   `json:"why,omitempty"` // why it was not sustained
	Invariants string   `json:"invariants"`    // PASS, FAIL or n/a
	Failed     []string `json:"failedInvariants,omitempty"`
	Code       string   `json:"code,omitempty"`
	CPU        *CPUUse  `json:"cpu,omitempty"`
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
}

// Target is one of the goals the design states, against what was measured.
type Target struct {
	Name string `json:"name"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// CompareReport is compare.json.
type CompareReport struct {
	Started      time.Time     `json:"started"`
	Seconds      float64       `json:"seconds"`
	CPUs         int           `json:"cpus"`
	LoadAvg      float64       `json:"loadAvg1AtStart"`
	StepDuration float64       `json:"stepDurationSeconds"`
	FixedRate    float64       `json:"fixedRate"`
	Sustain      string        `json:"sustainedMeans"`
	Paths        []*PathResult `json:"paths"`
	Flash80      *StepResult   `json:"flashAt80PercentOfMax,omitempty"`
	Sale         *Summary      `json:"sale,omitempty"`
	Targets      []Target      `json:"targets"`
	Invariants   bool          `json:"allInvariantsPassed"`
}

func stepOf(s *Summary, sus Sustain) StepResult {
	r := StepResult{Rate: s.RequestedRate, Achieved: s.AchievedRate, P50Ms: s.All.P50, P99Ms: s.All.P99,
		P999Ms: s.All.P999, ErrorRate: s.ErrorRate, Admitted: s.AdmittedOrders, Invariants: "n/a", Code: s.Code, CPU: s.CPU}
	r.Sustained, r.Why = sus.Judge(s)
	if len(s.Checks) > 0 {
		r.Invariants = verdict(s.Pass)
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
	cfg     CompareConfig
	benches map[string]*Bench
	log     io.Writer
	failed  []string // invariant failures, "path at rate: name"
}

// shape is the burst a path gets at rate: a fresh voucher with enough uses that
// the flash and standard paths admit every order (stock = requests, one order
// per customer), or none at all for the sold-out path.
func (c *comparer) shape(path string, rate float64, d time.Duration) BurstConfig {
	b := BurstConfig{Label: path, Rate: rate, Duration: d, PerUser: 1, Retry: c.cfg.Retry,
		Flash: path != pathStandard, Seed: uint64(rate), Attack: c.cfg.Attack}
	b.Stock = b.Requests()
	b.Customers = b.Requests()
	switch path {
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
func (c *comparer) burst(ctx context.Context, path string, cfg BurstConfig) (*Summary, StepResult, error) {
	s, err := RunBurst(ctx, c.benches[path], cfg)
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
	climbs := map[string]*Climb{}
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

// runCompare is `loadtest compare`.
func runCompare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	cfg := CompareConfig{Sustain: DefaultSustain}
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
	fs.Float64Var(&cfg.Sustain.MaxErrorRate, "max-errors", DefaultSustain.MaxErrorRate, "most failed requests of a sustained step (share)")
	fs.DurationVar(&cfg.Sustain.MaxP99, "max-p99", DefaultSustain.MaxP99, "highest p99 of a sustained step")
	fs.Float64Var(&cfg.Sustain.MinAchieved, "min-achieved", DefaultSustain.MinAchieved, "lowest achieved/requested rate of a sustained step")
	sale := BurstConfig{Label: "sale", PerUser: 1, Flash: true, Seed: 1}
	fs.Float64Var(&sale.Rate, "sale-rate", 5000, "rate of the 1,000-use burst (0: skip it)")
	fs.DurationVar(&sale.Duration, "sale-duration", 4*time.Second, "duration of the 1,000-use burst")
	fs.IntVar(&sale.Stock, "sale-stock", 1000, "uses of the 1,000-use burst's voucher")
	fs.IntVar(&sale.Customers, "sale-customers", 15000, "customers of the 1,000-use burst")
	fs.DurationVar(&sale.StatsWait, "stats-wait", 11*time.Second, "wait before reading Postgres commits after the 1,000-use burst")
	attackFlags(fs, &cfg.Attack)
	out := fs.String("out", "", "report directory (default loadtest/reports/compare-<timestamp>)")
	binDir := fs.String("bin", "", "directory holding ledger and proxy")
	token := fs.String("token", "dev-token", "LEDGER_TOKEN of the stack")
	_ = fs.Parse(args)
	cfg.Paths = strings.Split(*pathList, ",")
	for _, p := range cfg.Paths {
		if !slices.Contains(allPaths, p) {
			return fmt.Errorf("unknown path %q (want some of %s)", p, strings.Join(allPaths, ","))
		}
	}
	sale.Retry, sale.Attack = cfg.Retry, cfg.Attack
	cfg.Sale = sale
	if *out == "" {
		*out = defaultOut("compare")
	}
	if cfg.Ladder.Factor <= 1 || cfg.Ladder.Start <= 0 || cfg.StepDuration <= 0 {
		return errors.New("--start-rate and --step-duration must be positive and --factor above 1")
	}

	started := time.Now()
	fmt.Println("starting a local stack...")
	st, err := StartStack(StackOptions{BinDir: *binDir, Token: *token})
	if err != nil {
		return err
	}
	defer st.Stop()
	b, err := OpenBench(ctx, st.Endpoints())
	if err != nil {
		return err
	}
	defer b.Close()
	c := &comparer{cfg: cfg, log: os.Stdout, benches: map[string]*Bench{
		pathStandard: b, pathFlash: b, pathSoldOut: b, pathGate: b,
	}}
	if slices.Contains(cfg.Paths, pathNoCoalesce) || slices.Contains(cfg.Paths, pathGateNoCo) {
		url, err := st.StartProxy("proxy-nocoalesce", "PROXY_COALESCE=off")
		if err != nil {
			return err
		}
		c.benches[pathNoCoalesce] = b.WithURL(url)
		c.benches[pathGateNoCo] = b.WithURL(url)
	}
	if slices.Contains(cfg.Paths, pathCeiling) {
		ceil, err := startCeiling()
		if err != nil {
			return err
		}
		defer ceil.Stop()
		c.benches[pathCeiling] = BareBench(ceil.URL)
	}

	rep := &CompareReport{Started: started, CPUs: runtime.NumCPU(), LoadAvg: loadAvg(), StepDuration: cfg.StepDuration.Seconds(),
		FixedRate: cfg.FixedRate, Sustain: fmt.Sprintf("errors <= %.2g%%, p99 <= %s, achieved >= %.0f%% of requested, invariants pass",
			100*cfg.Sustain.MaxErrorRate, cfg.Sustain.MaxP99, 100*cfg.Sustain.MinAchieved)}
	var paths []string // in the order of allPaths
	for _, p := range allPaths {
		if slices.Contains(cfg.Paths, p) {
			paths = append(paths, p)
		}
	}
	if rep.Paths, err = c.measureAll(ctx, paths); err != nil {
		return err
	}
	if flash := rep.path(pathFlash); flash != nil && flash.MaxRate > 0 {
		rate := flash.MaxRate * 0.8
		fmt.Fprintf(c.log, "flash at 80%% of its max (%.0f/s):\n", rate)
		_, r, err := c.burst(ctx, pathFlash, c.shape(pathFlash, rate, c.cfg.StepDuration))
		if err != nil {
			return err
		}
		rep.Flash80 = &r
	}
	if cfg.Sale.Rate > 0 {
		fmt.Fprintf(c.log, "the %d-use sale: %d requests at %.0f/s, %d customers, %.0f%% retries (then %s for Postgres statistics)\n",
			cfg.Sale.Stock, cfg.Sale.Requests(), cfg.Sale.Rate, cfg.Sale.Customers, 100*cfg.Sale.Retry, cfg.Sale.StatsWait)
		s, err := RunBurst(ctx, b, cfg.Sale)
		if err != nil {
			return fmt.Errorf("sale: %w", err)
		}
		PrintSummary(c.log, s)
		if html, _, err := WriteReport(filepath.Join(*out, "sale"), s); err == nil {
			fmt.Fprintf(c.log, "report:  %s\n", html)
		} else {
			return err
		}
		for _, ch := range s.Checks {
			if !ch.Pass {
				c.failed = append(c.failed, fmt.Sprintf("sale (%s): %s: %s", s.Code, ch.Name, ch.Detail))
			}
		}
		rep.Sale = s
	}
	rep.finish(cfg)
	rep.Seconds = time.Since(started).Seconds()
	rep.Invariants = len(c.failed) == 0

	var md strings.Builder
	rep.Markdown(&md, c.failed)
	fmt.Print("\n" + md.String())
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	mdPath, jsPath := filepath.Join(*out, "compare.md"), filepath.Join(*out, "compare.json")
	if err := os.WriteFile(mdPath, []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := writeJSON(jsPath, rep); err != nil {
		return err
	}
	fmt.Printf("\ncompare: %s\n         %s\n", mdPath, jsPath)
	if len(c.failed) > 0 {
		return fmt.Errorf("%d invariant failure(s)", len(c.failed))
	}
	return nil
}

func (r *CompareReport) path(name string) *PathResult {
	for _, p := range r.Paths {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// finish fills in the ratios and the targets.
func (r *CompareReport) finish(cfg CompareConfig) {
	ceil := r.path(pathCeiling)
	for _, p := range r.Paths {
		if ceil != nil && ceil.MaxRate > 0 {
			p.Ratio = p.MaxRate / ceil.MaxRate
		}
	}
	ratio := func(a, b string, want float64, name string) {
		pa, pb := r.path(a), r.path(b)
		if pa == nil || pb == nil {
			return
		}
		if pb.MaxRate == 0 {
			r.Targets = append(r.Targets, Target{Name: name, Got: fmt.Sprintf("%s sustained no rate tried", b), Pass: false})
			return
		}
		got := pa.MaxRate / pb.MaxRate
		r.Targets = append(r.Targets, Target{Name: name, Pass: got >= want,
			Got: fmt.Sprintf("%.2f x (%.0f/s vs %.0f/s)", got, pa.MaxRate, pb.MaxRate)})
	}
	ratio(pathFlash, pathCeiling, 0.7, "flash (coalesced) >= 0.7 x ceiling")
	ratio(pathGate, pathCeiling, 0.7, "flash gate (coalesced, refusals) >= 0.7 x ceiling")
	ratio(pathGate, pathGateNoCo, 1, "flash gate: coalesced >= one script call per request")
	ratio(pathSoldOut, pathCeiling, 0.9, "sold-out >= 0.9 x ceiling")
	ratio(pathFlash, pathStandard, 20, "flash >= 20 x standard")
	if s := r.Sale; s != nil && s.Commits != nil {
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("<= 0.1 commits per admitted (%d-use burst)", s.Stock),
			Pass: s.Commits.PerAdmitted <= 0.1,
			Got:  fmt.Sprintf("%.3f (%d commits / %d admitted)", s.Commits.PerAdmitted, s.Commits.Delta, s.AdmittedOrders)})
	}
	if f := r.Flash80; f != nil {
		r.Targets = append(r.Targets, Target{Name: "p99 < 100 ms at 80% of flash max, invariants pass",
			Pass: f.P99Ms < 100 && f.Invariants == "PASS" && f.ErrorRate <= cfg.Sustain.MaxErrorRate,
			Got: fmt.Sprintf("p99 %.1f ms at %.0f/s (achieved %.0f/s, errors %.2f%%), invariants %s",
				f.P99Ms, f.Rate, f.Achieved, 100*f.ErrorRate, f.Invariants)})
	}
}

// Markdown writes the compare table, the targets and each path's steps.
func (r *CompareReport) Markdown(w io.Writer, failed []string) {
	fmt.Fprintf(w, "## flashgate compare (%s, %d CPUs, everything on this machine; load average %.1f at the start, %.0f s)\n\n",
		r.Started.Format("2006-01-02 15:04"), r.CPUs, r.LoadAvg, r.Seconds)
	fmt.Fprintf(w, "Sustained: %s; steps of %.1fs; fixed rate %.0f/s.\n\n", r.Sustain, r.StepDuration, r.FixedRate)
	fixedHead := "p99 at a fixed rate (not run)"
	if r.FixedRate > 0 {
		fixedHead = fmt.Sprintf("p99 at %.0f/s", r.FixedRate)
	}
	fmt.Fprintf(w, "| path | max sustainable rate | p99 at max | %s | ratio to ceiling | stopped by |\n", fixedHead)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- |")
	for _, p := range r.Paths {
		maxRate, atMax := "none tried", "-"
		if p.AtMax != nil {
			maxRate = fmt.Sprintf("%.0f/s", p.MaxRate)
			atMax = fmt.Sprintf("%.1f ms", p.AtMax.P99Ms)
		}
		fixed := "-"
		if f := p.Fixed; f != nil {
			fixed = fmt.Sprintf("%.1f ms", f.P99Ms)
			if !f.Sustained {
				fixed += " (" + f.Why + ")"
			}
		}
		ratio := "-"
		if p.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", p.Ratio)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", p.Name, maxRate, atMax, fixed, ratio, p.stoppedBy())
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\n| target | measured | |\n| --- | --- | --- |")
		for _, t := range r.Targets {
			mark := "met"
			if !t.Pass {
				mark = "MISSED"
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, t.Got, mark)
		}
	}
	if s := r.Sale; s != nil {
		fmt.Fprintf(w, "\nThe %d-use sale: %d requests at %.0f/s (achieved %.0f/s), %d admitted, p99 %.1f ms (201s: p99 %.1f ms), errors %d, invariants %s",
			s.Stock, s.Requests, s.RequestedRate, s.AchievedRate, s.AdmittedOrders, s.All.P99, s.Admitted.P99, s.Errors, verdict(s.Pass))
		if c := s.Commits; c != nil {
			fmt.Fprintf(w, ", %d Postgres commits = %.3f per admitted", c.Delta, c.PerAdmitted)
		}
		fmt.Fprintln(w, ".")
	}
	fmt.Fprintln(w, "\nSteps (rate: achieved, p99, errors, CPUs used by load generator/flashgate stack/other processes, invariants; x = not sustained):")
	fmt.Fprintln(w)
	for _, p := range r.Paths {
		var parts []string
		for _, s := range append(slices.Clone(p.Steps), derefSteps(p.Fixed)...) {
			mark := ""
			if !s.Sustained {
				mark = " x"
			}
			cpu := ""
			if u := s.CPU; u != nil {
				cpu = fmt.Sprintf(", %.2f/%.2f/%.2f", u.GeneratorCores, u.StackCores, u.OtherCores)
			}
			parts = append(parts, fmt.Sprintf("%.0f: %.0f, %.1fms, %.1f%%%s, %s%s", s.Rate, s.Achieved, s.P99Ms, 100*s.ErrorRate, cpu, s.Invariants, mark))
		}
		fmt.Fprintf(w, "- %s (%s): %s\n", p.Name, p.Note, strings.Join(parts, "; "))
	}
	if len(failed) == 0 {
		fmt.Fprintln(w, "\nInvariants: PASS after every burst.")
		return
	}
	fmt.Fprintln(w, "\nInvariants: FAILED")
	for _, f := range failed {
		fmt.Fprintf(w, "- %s\n", f)
	}
}

// stoppedBy says what bounded the ladder: the lowest rate above the maximum
// that was not sustained (on its last run), or the step limit.
func (p *PathResult) stoppedBy() string {
	var bound *StepResult
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.Rate > p.MaxRate && (bound == nil || s.Rate <= bound.Rate) {
			bound = s
		}
	}
	switch {
	case bound != nil && !bound.Sustained:
		return fmt.Sprintf("%.0f/s: %s", bound.Rate, bound.Why)
	case p.MaxRate == 0:
		return "floor rate"
	}
	return "max steps"
}

func derefSteps(s *StepResult) []StepResult {
	if s == nil {
		return nil
	}
	return []StepResult{*s}
}
