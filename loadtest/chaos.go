package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/devstack"
)

// The chaos harness runs each fault scenario under a burst on a system of its
// own, then checks the invariants against the database and Redis and measures
// how long the system took to recover by itself.

const (
	chaosToken = "chaos-token"
	// probeStock is the probe voucher's uses: probes never sell it out, so
	// every answered probe is a 201 that needed Redis, the ledger and Postgres.
	probeStock   = 100_000
	probeEvery   = 50 * time.Millisecond
	probeTimeout = 2 * time.Second
	probesInARow = 5 // answered probes in a row that count as recovered
	// retryingShare is the arrival rate of the clients that retry their 503s,
	// as a share of the burst's.
	retryingShare = 0.05
	settlePolling = 100 * time.Millisecond
)

// ChaosConfig is what every scenario of a run shares: the burst it runs under,
// when the fault strikes and how long it lasts, and the recovery bounds.
type ChaosConfig struct {
	BinDir        string        // where bin/ledger and bin/proxy are
	Rate          float64       // burst requests per second (open model)
	Duration      time.Duration // burst length
	FaultAt       time.Duration // the fault starts this long into the burst
	FaultFor      time.Duration // and lasts this long (a kill: down this long, then restarted)
	Stock         int           // the burst voucher's uses; 0: 30% of the requests
	RecoveryBound time.Duration // after the fault, new reserves are answered within this
	SettleBound   time.Duration // after the last request, Redis = DB within this
	Fast503       time.Duration // while the fault lasts, p99 of the 503 answers stays within this
	Seed          uint64
	Attack        AttackOptions
	ServiceLog    *os.File // where the services write their output; nil: stderr
}

// DefaultChaos is `loadtest chaos` without flags: a rate this 2-core machine
// sustains with a fault in the path, and a fault long enough to trip
// breakers and time requests out.
var DefaultChaos = ChaosConfig{
	Rate: 1500, Duration: 6 * time.Second, FaultAt: 1500 * time.Millisecond, FaultFor: 2 * time.Second,
	RecoveryBound: 10 * time.Second, SettleBound: 10 * time.Second, Fast503: 1500 * time.Millisecond, Seed: 1,
	Attack: AttackOptions{Workers: 64, MaxWorkers: 4096, Connections: 4096, Timeout: 5 * time.Second},
}

// ShortChaos is the test's version (`--short`): every scenario in a few seconds.
var ShortChaos = func() ChaosConfig {
	c := DefaultChaos
	c.Rate, c.Duration, c.FaultAt, c.FaultFor = 1000, 2*time.Second, 500*time.Millisecond, 800*time.Millisecond
	return c
}()

// requests is how many requests each scenario's burst sends.
func (c ChaosConfig) requests() int { return max(int(math.Round(c.Rate*c.Duration.Seconds())), 1) }

// RunScenario runs sc under a burst on a system of its own and judges it:
// invariants against the database and Redis, and recovery within the bounds.
func RunScenario(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg ChaosConfig) (*ChaosResult, error) {
	r, err := startRig(ctx, pg, sc, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: start the system: %w", sc.Name, err)
	}
	defer r.Close(ctx)

	n := cfg.requests()
	stock := cfg.Stock
	if stock <= 0 {
		stock = max(n*3/10, 1)
	}
	spec := VoucherSpec{Code: newCode(codePrefix(sc.Name)), Stock: stock, PerUser: 1, Flash: true}
	probeSpec := VoucherSpec{Code: newCode("probe"), Stock: probeStock, PerUser: 1, Flash: true}
	for _, v := range []VoucherSpec{spec, probeSpec} {
		if err := r.bench.CreateVoucher(ctx, v); err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
	}
	// Customers below the order count: some order twice and meet their limit.
	customers := max(n*7/10, 1)
	plan := NewPlan(spec.Code, Crowd{Requests: n, Customers: customers, Retry: 0.10, Seed: cfg.Seed})

	volley := make(chan Volley, 1)
	rc := newRetryingClients(r.st.ProxyURL, spec.Code, int64(customers)+1, cfg.Attack.Timeout)
	retried := make(chan struct{})
	start := time.Now()
	go func() {
		volley <- Fire(ctx, r.st.ProxyURL+"/vouchers/"+spec.Code+"/reservations", plan, orderAmount, cfg.Rate, cfg.Attack)
	}()
	go func() {
		defer close(retried)
		rc.run(ctx, cfg.Rate*retryingShare, cfg.Duration)
	}()
	sleepCtx(ctx, time.Until(start.Add(cfg.FaultAt)))

	pr := newProber(r.st.ProxyURL, probeSpec.Code, cfg.RecoveryBound)
	go pr.run(ctx)
	faultStart := time.Now()
	end, faultErr := sc.Inject(ctx, r, cfg.FaultFor)
	if faultErr == nil && end != nil {
		sleepCtx(ctx, time.Until(faultStart.Add(cfg.FaultFor)))
		faultErr = end()
	}
	faultEnd := time.Now()
	pr.faultEnded(faultEnd)
	v := <-volley
	<-retried
	probes := pr.wait()
	if faultErr != nil {
		return nil, fmt.Errorf("%s: inject the fault: %w", sc.Name, faultErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	quiet := time.Now()
	settled, settleDetail := waitSettled(ctx, r.bench, cfg.SettleBound, spec.Code, probeSpec.Code)

	res := &ChaosResult{
		Scenario: sc.Name, Fault: sc.Describe(cfg.FaultFor), Code: spec.Code, ProbeCode: probeSpec.Code, Stock: stock,
		FaultAt: faultStart.Sub(start).Seconds(), FaultSeconds: faultEnd.Sub(faultStart).Seconds(),
		Rate: cfg.Rate, Probes: len(probes), Statuses: map[string]int{},
		RecoveryBound: cfg.RecoveryBound.Seconds(), SettleBound: cfg.SettleBound.Seconds(),
		RecoverySeconds: -1, SettleSeconds: -1, SettleDetail: settleDetail,
	}
	_, rcShots := rc.merge(Plan{}, nil)
	res.tally(slices.Concat(v.Shots, rcShots), probes, faultStart, faultEnd)
	res.RetryingOrders, res.RetryingSends = len(rc.plan.Orders), len(rcShots)
	res.Achieved = summarize(BurstConfig{Label: sc.Name, Rate: cfg.Rate, Duration: cfg.Duration}, spec, plan, v).AchievedRate
	if at, ok := recoveredAt(probes, faultEnd, probesInARow); ok {
		res.RecoverySeconds = at.Sub(faultEnd).Seconds()
	}
	if settled >= 0 {
		res.SettleSeconds = settled.Seconds()
	}

	all, shots := rc.merge(plan, v.Shots)
	burst, err := chaosChecks(ctx, r.bench, spec, all, shots, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	probeChecks, err := chaosChecks(ctx, r.bench, probeSpec, pr.plan, probes, "probes: ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	res.DB, res.RedisRemaining = burst.db, burst.redisRemaining
	res.Checks = append(burst.checks, probeChecks.checks...)
	recovered := res.RecoverySeconds >= 0 && res.RecoverySeconds <= res.RecoveryBound
	rec := fmt.Sprintf("never (probed for %s after the fault)", cfg.RecoveryBound)
	if res.RecoverySeconds >= 0 {
		rec = fmt.Sprintf("%.2f s", res.RecoverySeconds)
	}
	res.Checks = append(res.Checks, Check{Name: checkFast503,
		Pass: res.DuringFault503 == 0 || res.DuringFault503P99 <= float64(cfg.Fast503.Milliseconds()),
		Detail: fmt.Sprintf("%d answers 503 to requests sent while the fault lasted: p99 %.0f ms, max %.0f ms (bound: p99 within %s); %d requests sent meanwhile answered 201",
			res.DuringFault503, res.DuringFault503P99, res.DuringFault503Max, cfg.Fast503, res.DuringFault201)})
	res.Checks = append(res.Checks, Check{Name: checkRecovered, Pass: recovered,
		Detail: fmt.Sprintf("%d probes in a row answered %s after the fault ended (bound %s); %d probes, %d of them while the fault lasted",
			probesInARow, rec, cfg.RecoveryBound, len(probes), countSent(probes, faultStart, faultEnd))})
	set := fmt.Sprintf("never within %s", cfg.SettleBound)
	if res.SettleSeconds >= 0 {
		set = fmt.Sprintf("%.2f s", res.SettleSeconds)
	}
	res.Checks = append(res.Checks, Check{Name: checkSettled, Pass: settled >= 0,
		Detail: fmt.Sprintf("remaining and held orders equal on both vouchers %s after the last request (%.2f s after the fault ended; bound %s)%s",
			set, quiet.Sub(faultEnd).Seconds()+max(res.SettleSeconds, 0), cfg.SettleBound, suffix(settleDetail))})
	res.Pass = Passed(res.Checks)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// runChaos is `loadtest chaos`.
func runChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	cfg := DefaultChaos
	var picked multiFlag
	fs.Var(&picked, "scenario", "run this scenario (repeatable; default all): "+strings.Join(ScenarioNames(), ", "))
	short := fs.Bool("short", false, fmt.Sprintf("the test's durations (%.0f req/s for %s, fault at %s for %s) unless given",
		ShortChaos.Rate, ShortChaos.Duration, ShortChaos.FaultAt, ShortChaos.FaultFor))
	list := fs.Bool("list", false, "list the scenarios and exit")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "burst requests per second")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "burst length per scenario")
	fs.DurationVar(&cfg.FaultAt, "fault-at", cfg.FaultAt, "the fault starts this long into the burst")
	fs.DurationVar(&cfg.FaultFor, "fault-for", cfg.FaultFor, "how long a fault lasts (a killed process stays down this long)")
	fs.IntVar(&cfg.Stock, "stock", 0, "the burst voucher's uses (0: 30% of the requests)")
	fs.DurationVar(&cfg.RecoveryBound, "recovery-bound", cfg.RecoveryBound, "new reserves must be answered within this after the fault")
	fs.DurationVar(&cfg.SettleBound, "settle-bound", cfg.SettleBound, "Redis must equal the database within this after the last request")
	fs.DurationVar(&cfg.Fast503, "fast-503", cfg.Fast503, "while a fault lasts, the p99 of the 503 answers must stay within this")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the request plans")
	fs.DurationVar(&cfg.Attack.Timeout, "timeout", cfg.Attack.Timeout, "per-request timeout of the clients (no answer within it: a failed request)")
	fs.IntVar(&cfg.Attack.MaxWorkers, "max-workers", cfg.Attack.MaxWorkers, "most requests in flight")
	out := fs.String("out", "", "report directory (default loadtest/reports/chaos-<timestamp>)")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory holding ledger and proxy")
	durablePG := fs.Bool("durable-pg", false, "Postgres with fsync on")
	_ = fs.Parse(args)
	if *list {
		for _, s := range Scenarios() {
			fmt.Printf("%-17s %s\n", s.Name, s.Describe(cfg.FaultFor))
		}
		return nil
	}
	if *short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, apply := range map[string]func(){
			"rate": func() { cfg.Rate = ShortChaos.Rate }, "duration": func() { cfg.Duration = ShortChaos.Duration },
			"fault-at": func() { cfg.FaultAt = ShortChaos.FaultAt }, "fault-for": func() { cfg.FaultFor = ShortChaos.FaultFor },
		} {
			if !set[name] {
				apply()
			}
		}
	}
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.FaultAt < 0 || cfg.FaultFor <= 0 || cfg.FaultAt >= cfg.Duration {
		return errors.New("need --rate > 0, --duration > 0, --fault-for > 0 and 0 <= --fault-at < --duration")
	}
	scenarios := Scenarios()
	if len(picked) > 0 {
		var chosen []Scenario
		for _, name := range picked {
			i := slices.IndexFunc(scenarios, func(s Scenario) bool { return s.Name == name })
			if i < 0 {
				return fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(ScenarioNames(), ", "))
			}
			chosen = append(chosen, scenarios[i])
		}
		scenarios = chosen
	}
	if *out == "" {
		*out = defaultOut("chaos")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(*out, "services.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cfg.ServiceLog = logFile

	rep := newChaosReport(cfg, "loadtest chaos "+strings.Join(args, " "))
	fmt.Printf("chaos: %d scenarios, each under %d requests at %.0f/s with the fault %s in for %s; services log to %s\n",
		len(scenarios), cfg.requests(), cfg.Rate, cfg.FaultAt, cfg.FaultFor, logPath)
	pg, err := devstack.StartPostgres(devstack.PostgresOptions{Durable: *durablePG})
	if err != nil {
		return err
	}
	defer pg.Stop()
	for _, sc := range scenarios {
		fmt.Printf("%-17s %s ... ", sc.Name, sc.Describe(cfg.FaultFor))
		res, err := RunScenario(ctx, pg, sc, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			res = &ChaosResult{Scenario: sc.Name, Fault: sc.Describe(cfg.FaultFor), Error: err.Error(),
				RecoverySeconds: -1, SettleSeconds: -1, Statuses: map[string]int{}}
		}
		rep.Results = append(rep.Results, res)
		fmt.Printf("%s (recovered %s, Redis = DB %s)\n", verdict(res.Pass), seconds(res.RecoverySeconds), seconds(res.SettleSeconds))
		for _, c := range res.Checks {
			if !c.Pass {
				fmt.Printf("    FAIL %s: %s\n", c.Name, c.Detail)
			}
		}
		if res.Error != "" {
			fmt.Printf("    ERROR %s\n", res.Error)
		}
	}
	rep.finish()
	fmt.Println()
	PrintChaosTable(os.Stdout, rep.Results)
	md, js, err := WriteChaosReport(*out, rep)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\nreport:  %s\nsummary: %s\n", rep.Verdicts, md, js)
	if !rep.Pass {
		return fmt.Errorf("chaos: %s", rep.Verdicts)
	}
	return nil
}
