// Package chaos is the `chaos` command: it runs each fault scenario (toxiproxy
// between the services and Redis and Postgres, kill -9 and SIGTERM of every
// process, overload, the soak) under a burst on a system of its own, then
// checks the invariants against the database and Redis and measures how long
// the system took to recover by itself.
package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

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

// Config is what every scenario of a run shares: the burst it runs under,
// when the fault strikes and how long it lasts, and the recovery bounds.
type Config struct {
	BinDir        string        // where bin/ledger and bin/proxy are
	Rate          float64       // burst requests per second (open model)
	Duration      time.Duration // burst length
	FaultAt       time.Duration // the fault starts this long into the burst
	FaultFor      time.Duration // and lasts this long (a kill: down this long, then restarted)
	Stock         int           // the burst voucher's uses; 0: 30% of the requests
	RecoveryBound time.Duration // after the fault, new reserves are answered within this
	SettleBound   time.Duration // after the last request, Redis = DB within this
	Fast503       time.Duration // while the fault lasts, p99 of the 503 answers stays within this plus twice the machine's load (the larger of the answers' p99 before it and the proxy's /healthz p99 while it lasts)
	// Ledgers is log-sale's ledgers in the admissions group (1 or 2; 2:
	// behind a TCP balancer the proxy talks to); 0: 1.
	Ledgers int
	// BrokerDown is how long log-sale's broker stays stopped; 0: FaultFor.
	BrokerDown time.Duration
	Seed       uint64
	Short      bool    // the test's plan: scenarios with their own (Tune, Run) take their short one
	FlashMax   float64 // the flash path's maximum sustainable rate: soak sends 1/2, overload 3x when not MeasureMax
	MeasureMax bool    // overload and the full soak measure the maximum on their own rig first (no --flash-max given)
	Attack     load.AttackOptions
	ServiceLog io.Writer // where the services write their output; nil: stderr
	Progress   io.Writer // a line per finished soak round; nil: none
}

// DefaultConfig is `loadtest chaos` without flags: a rate this 2-core machine
// sustains with a fault in the path, and a fault long enough to trip
// breakers and time requests out.
var DefaultConfig = Config{
	Rate: 1500, Duration: 6 * time.Second, FaultAt: 1500 * time.Millisecond, FaultFor: 2 * time.Second,
	RecoveryBound: 10 * time.Second, SettleBound: 10 * time.Second, Fast503: 1500 * time.Millisecond, Seed: 1,
	FlashMax: flashMax, MeasureMax: true,
	Attack: load.AttackOptions{Workers: 64, MaxWorkers: 4096, Connections: 4096, Timeout: 5 * time.Second},
}

// ShortConfig is the test's version (`--short`): every scenario in a few seconds.
var ShortConfig = func() Config {
	c := DefaultConfig
	c.Rate, c.Duration, c.FaultAt, c.FaultFor = 1000, 2*time.Second, 500*time.Millisecond, 800*time.Millisecond
	c.Short = true
	return c
}()

// requests is how many requests each scenario's burst sends.
func (c Config) requests() int { return load.RequestCount(c.Rate, c.Duration) }

// RunScenario runs sc under a burst on a system of its own and judges it:
// invariants against the database and Redis, and recovery within the bounds.
func RunScenario(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg Config) (*Result, error) {
	load.RaiseOpenFiles()
	if sc.Tune != nil {
		cfg = sc.Tune(cfg)
	}
	if sc.Run != nil {
		return sc.Run(ctx, pg, sc, cfg)
	}
	r, err := startRig(ctx, pg, sc, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: start the system: %w", sc.Name, err)
	}
	defer r.Close(ctx)

	t, err := newTraffic(ctx, r.bench, sc.Name, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	if err := t.drive(ctx, r, sc, cfg); err != nil {
		return nil, err
	}
	quiet := time.Now()
	settled, settleDetail := waitSettled(ctx, r.bench, cfg.SettleBound, t.spec.Code, t.probeSpec.Code)
	res := t.result(sc, cfg, settled, settleDetail)
	if err := t.judge(ctx, r.bench, res, cfg, quiet.Sub(t.faultEnd)); err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	if sc.Strict {
		res.Checks = append(res.Checks, res.answeredCheck())
	}
	agree := r.agreementChecks(ctx, quiet.Add(cfg.SettleBound), t.spec.Code, t.probeSpec.Code)
	if !agree[0].Pass {
		agree[0].Detail += t.driftDetail(ctx, r.bench)
	}
	res.Checks = append(res.Checks, agree...)
	res.Pass = verify.Passed(res.Checks)
	return res, nil
}

// chaosCmd is `loadtest chaos` as its flags ask for it.
type chaosCmd struct {
	Config    Config
	Scenarios []Scenario
	List      bool // list the scenarios and exit; nothing else is filled in
	DurablePG bool
	Out       string // the report directory
	Command   string // as typed, for the report
}

// parseChaosFlags reads `loadtest chaos`'s flags.
func parseChaosFlags(args []string) (chaosCmd, error) {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	c := chaosCmd{Config: DefaultConfig, Command: "loadtest chaos " + strings.Join(args, " ")}
	cfg := &c.Config
	var picked load.MultiFlag
	fs.Var(&picked, "scenario", "run this scenario (repeatable; default all): "+strings.Join(ScenarioNames(), ", "))
	short := fs.Bool("short", false, fmt.Sprintf("the test's durations (%.0f req/s for %s, fault at %s for %s) unless given",
		ShortConfig.Rate, ShortConfig.Duration, ShortConfig.FaultAt, ShortConfig.FaultFor))
	fs.BoolVar(&c.List, "list", false, "list the scenarios and exit")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "burst requests per second")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "burst length per scenario")
	fs.DurationVar(&cfg.FaultAt, "fault-at", cfg.FaultAt, "the fault starts this long into the burst")
	fs.DurationVar(&cfg.FaultFor, "fault-for", cfg.FaultFor, "how long a fault lasts (a killed process stays down this long)")
	fs.IntVar(&cfg.Stock, "stock", 0, "the burst voucher's uses (0: 30% of the requests; log-sale's voucher: 50,000, --short 1,000)")
	fs.IntVar(&cfg.Ledgers, "ledgers", 1, "log-sale: ledgers in the admissions consumer group (1 or 2; 2: behind a TCP balancer the proxy talks to, the first one killed)")
	fs.DurationVar(&cfg.BrokerDown, "broker-down", 0, "log-sale: how long the broker stays stopped (0: --fault-for); longer than the ledgers' HANGING_GRACE (2s) tempts the reconciler")
	fs.DurationVar(&cfg.RecoveryBound, "recovery-bound", cfg.RecoveryBound, "new reserves must be answered within this after the fault")
	fs.DurationVar(&cfg.SettleBound, "settle-bound", cfg.SettleBound, "Redis must equal the database within this after the last request")
	fs.DurationVar(&cfg.Fast503, "fast-503", cfg.Fast503, "while a fault lasts, the p99 of the 503 answers must stay within this plus twice the machine's load, measured in the same run: the larger of the p99 of the answers sent before the fault and the p99 of the proxy's /healthz while it lasts")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the request plans")
	fs.Float64Var(&cfg.FlashMax, "flash-max", cfg.FlashMax, "the flash path's maximum sustainable rate: soak sends half, overload 3x (default: measured first on the scenario's own stack)")
	fs.DurationVar(&cfg.Attack.Timeout, "timeout", cfg.Attack.Timeout, "per-request timeout of the clients (no answer within it: a failed request)")
	fs.IntVar(&cfg.Attack.MaxWorkers, "max-workers", cfg.Attack.MaxWorkers, "most requests in flight")
	fs.StringVar(&c.Out, "out", "", "report directory (default loadtest/reports/chaos-<timestamp>)")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory holding ledger and proxy")
	fs.BoolVar(&c.DurablePG, "durable-pg", false, "Postgres with fsync on")
	_ = fs.Parse(args)
	if c.List {
		return c, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg.MeasureMax = !set["flash-max"]
	if *short {
		cfg.Short = true
		cfg.shorten(set)
	}
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.FaultAt < 0 || cfg.FaultFor <= 0 || cfg.FaultAt >= cfg.Duration {
		return c, errors.New("need --rate > 0, --duration > 0, --fault-for > 0 and 0 <= --fault-at < --duration")
	}
	if cfg.Ledgers < 1 || cfg.Ledgers > 2 || cfg.BrokerDown < 0 {
		return c, errors.New("need --ledgers 1 or 2 and --broker-down >= 0")
	}
	var err error
	if c.Scenarios, err = pickScenarios(picked); err != nil {
		return c, err
	}
	if c.Out == "" {
		c.Out = verify.DefaultOut("chaos")
	}
	return c, nil
}

// shorten takes ShortConfig's rate and durations for those not set by a flag.
func (c *Config) shorten(set map[string]bool) {
	for name, apply := range map[string]func(){
		"rate": func() { c.Rate = ShortConfig.Rate }, "duration": func() { c.Duration = ShortConfig.Duration },
		"fault-at": func() { c.FaultAt = ShortConfig.FaultAt }, "fault-for": func() { c.FaultFor = ShortConfig.FaultFor },
	} {
		if !set[name] {
			apply()
		}
	}
}

// Run is `loadtest chaos`.
func Run(ctx context.Context, args []string) error {
	c, err := parseChaosFlags(args)
	if err != nil {
		return err
	}
	if c.List {
		for _, s := range Scenarios() {
			fmt.Printf("%-17s %s\n", s.Name, s.Describe(c.Config.FaultFor))
		}
		return nil
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(c.Out, "services.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	c.Config.ServiceLog, c.Config.Progress = logFile, os.Stdout
	fmt.Printf("chaos: %d scenarios, each under %d requests at %.0f/s with the fault %s in for %s; services log to %s\n",
		len(c.Scenarios), c.Config.requests(), c.Config.Rate, c.Config.FaultAt, c.Config.FaultFor, logPath)
	rep, err := c.run(ctx)
	if err != nil {
		return err
	}
	return reportChaos(rep, c.Out)
}

// run runs every scenario in turn on one Postgres server, printing a line
// for each.
func (c chaosCmd) run(ctx context.Context) (*Report, error) {
	rep := newReport(c.Config, c.Command)
	pg, err := devstack.StartPostgres(devstack.PostgresOptions{Durable: c.DurablePG})
	if err != nil {
		return nil, err
	}
	defer pg.Stop()
	for _, sc := range c.Scenarios {
		fmt.Printf("%-17s %s ... ", sc.Name, sc.Describe(c.Config.FaultFor))
		res, err := RunScenario(ctx, pg, sc, c.Config)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			res = &Result{Scenario: sc.Name, Fault: sc.Describe(c.Config.FaultFor), Error: err.Error(),
				RecoverySeconds: -1, SettleSeconds: -1, Statuses: map[string]int{}}
		}
		rep.Results = append(rep.Results, res)
		fmt.Printf("%s (recovered %s, Redis = DB %s)\n", verify.Verdict(res.Pass), seconds(res.RecoverySeconds), seconds(res.SettleSeconds))
		for _, ch := range res.Checks {
			if !ch.Pass {
				fmt.Printf("    FAIL %s: %s\n", ch.Name, ch.Detail)
			}
		}
		if res.Error != "" {
			fmt.Printf("    ERROR %s\n", res.Error)
		}
	}
	rep.finish()
	return rep, nil
}
