// Package burst is the flash sale at a constant rate (or at a recorded
// file's times) against a fresh voucher, checked against Postgres and Redis:
// the `burst`, `replay` and `demo` commands, and Send, which compare and
// chaos run their bursts with.
package burst

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Config is one burst: its traffic and the voucher it goes after.
type Config struct {
	Label     string        // names the burst in reports; also the voucher code's prefix
	Rate      float64       // requests per second, constant (open model)
	Duration  time.Duration // Rate x Duration requests are sent
	Stock     int           // the voucher's totalLimit
	PerUser   int           // the voucher's perUserLimit
	Customers int           // distinct customers
	Retry     float64       // share of requests resending an earlier orderId
	Flash     bool          // flash voucher (Redis gate) or standard (guarded UPDATE)
	WritePath string        // a flash voucher's writePath (voucher.WritePathLog: Approach B); empty: sync
	Seed      uint64
	// StatsWait > 0 measures Postgres commits per admitted reservation, waiting
	// this long after the burst for backends to publish their counters (Postgres
	// 15+ flushes an idle backend's statistics up to 10 s late).
	StatsWait time.Duration
	Attack    load.AttackOptions

	Replay  *Replay // recorded traffic to send instead of a generated crowd (Rate, Duration: its own)
	Record  string  // when set, the requests sent are written there as a traffic file (TrafficLine)
	Results string  // when set, every answer is written there in vegeta's result format
	// Procs, when set, names the processes the run started (the stack's,
	// this one): the summary's CPU then holds each one's CPU per request.
	Procs func() load.Procs
}

// Requests is how many requests the burst sends.
func (c Config) Requests() int { return load.RequestCount(c.Rate, c.Duration) }

// Send creates a fresh voucher, fires the burst at b.URL and, when b has a
// database, checks the invariants against the database and Redis.
func Send(ctx context.Context, b *verify.Bench, cfg Config) (*verify.Summary, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("rate and duration must be positive")
	}
	if cfg.Label == "" {
		cfg.Label = "burst"
	}
	spec := verify.VoucherSpec{Code: verify.NewCode(CodePrefix(cfg.Label)), Stock: cfg.Stock, PerUser: max(cfg.PerUser, 1), Flash: cfg.Flash, WritePath: cfg.WritePath}
	plan := load.NewPlan(spec.Code, load.Crowd{Requests: cfg.Requests(), Customers: cfg.Customers, Retry: cfg.Retry, Seed: cfg.Seed})
	if cfg.Replay != nil {
		plan, cfg.Attack.Schedule = cfg.Replay.planFor(spec.Code), cfg.Replay.At
		cfg.Customers, cfg.Retry = plan.DistinctCustomers(), float64(plan.Retries)/float64(max(len(plan.Requests), 1))
	}
	results, enc, err := resultsFile(cfg.Results)
	if err != nil {
		return nil, err
	}
	if results != nil {
		defer results.Close()
		cfg.Attack.Results = enc
	}
	var before int64
	if b.Checked() {
		if err := b.CreateVoucher(ctx, spec); err != nil {
			return nil, err
		}
		if cfg.StatsWait > 0 {
			var err error
			if before, err = b.Commits(ctx); err != nil {
				return nil, err
			}
		}
	}

	url := load.ReserveURL(b.URL, spec.Code)
	v, cpu := fire(ctx, url, plan, cfg)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if v.ResultsErr != nil {
		return nil, fmt.Errorf("vegeta results %s: %w", cfg.Results, v.ResultsErr)
	}
	if results != nil {
		if err := results.Close(); err != nil {
			return nil, fmt.Errorf("vegeta results %s: %w", cfg.Results, err)
		}
	}
	if cfg.Record != "" {
		if err := writeTraffic(cfg.Record, spec.Code, plan, v.Shots, cfg.Rate); err != nil {
			return nil, err
		}
	}
	s := Summarize(cfg, spec, plan, v)
	s.URL = url
	s.CPU = cpu
	if !b.Checked() {
		return s, nil
	}

	if err := check(ctx, b, spec, plan, v.Shots, s); err != nil {
		return nil, err
	}
	if cfg.StatsWait > 0 {
		var err error
		if s.Commits, err = b.CommitsSince(ctx, before, cfg.StatsWait, s.AdmittedOrders); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// fire sends the burst and reads the CPU it took: the machine's, the
// generator's and, with cfg.Procs, each of the run's processes'.
func fire(ctx context.Context, url string, plan load.Plan, cfg Config) (load.Volley, *load.CPUUse) {
	var procs load.Procs
	if cfg.Procs != nil {
		procs = cfg.Procs()
	}
	loadAvg, cpu0, t0 := load.LoadAvg(), load.ReadCPU(), load.ReadProcTimes(procs)
	v := load.Fire(ctx, url, plan, load.OrderAmount, cfg.Rate, cfg.Attack)
	cpu1, t1 := load.ReadCPU(), load.ReadProcTimes(procs)
	u := load.CPUBetween(cpu0, cpu1, runtime.NumCPU(), loadAvg)
	u.PerRequest(len(v.Shots))
	if procs != nil {
		u.PerRequestUs = load.PerRequestMicros(t1.Since(t0), int64(len(v.Shots)))
	}
	return v, u
}

// logWriteWait is how long a log voucher's burst waits for the consumer to
// write every order answered 201 before its checks run.
const logWriteWait = 2 * time.Minute

// CodePrefix makes a label fit a voucher code: letters, digits and '-', short.
func CodePrefix(label string) string {
	var b strings.Builder
	for _, r := range label {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '-' || r == '_' || r == ' ':
			b.WriteByte('-')
		}
		if b.Len() == 8 {
			break
		}
	}
	if b.Len() == 0 {
		return "lt"
	}
	return b.String()
}

// Summarize turns the raw answers into the figures a report shows.
func Summarize(cfg Config, spec verify.VoucherSpec, plan load.Plan, v load.Volley) *verify.Summary {
	s := &verify.Summary{
		Label: cfg.Label, Code: spec.Code, Flash: spec.Flash, Stock: spec.Stock, PerUser: spec.PerUser,
		Customers: cfg.Customers, DistinctCustomers: plan.DistinctCustomers(), Retry: cfg.Retry,
		Requests: len(plan.Requests), Orders: len(plan.Orders), Retries: plan.Retries,
		Demand: plan.Demand(spec.PerUser), RequestedRate: v.Rate, DurationSeconds: cfg.Duration.Seconds(),
		Statuses: map[string]int{}, Shots: v.Shots,
	}
	s.Expected = min(spec.Stock, s.Demand)
	all := make([]time.Duration, 0, len(v.Shots))
	var ok []time.Duration
	admitted := map[int32]bool{}
	var first, lastSent, lastDone time.Time
	errSeen := map[string]bool{}
	for _, sh := range v.Shots {
		all = append(all, sh.Latency)
		if first.IsZero() || sh.At.Before(first) {
			first = sh.At
		}
		if sh.At.After(lastSent) {
			lastSent = sh.At
		}
		if end := sh.At.Add(sh.Latency); end.After(lastDone) {
			lastDone = end
		}
		s.Statuses[load.StatusKey(sh)]++
		if sh.Status == http.StatusServiceUnavailable {
			s.Unavailable++
		}
		if sh.Failed() {
			s.Errors++
			msg := sh.Err
			if msg == "" {
				msg = load.StatusKey(sh)
			}
			if !errSeen[msg] && len(s.ErrorSamples) < 5 {
				errSeen[msg] = true
				s.ErrorSamples = append(s.ErrorSamples, msg)
			}
		}
		if sh.Status == http.StatusCreated {
			ok = append(ok, sh.Latency)
			if sh.Req >= 0 && int(sh.Req) < len(plan.Requests) {
				admitted[plan.Requests[sh.Req]] = true
			}
		}
	}
	s.AdmittedOrders = len(admitted)
	s.Answered = len(v.Shots)
	if n := len(v.Shots); n > 0 {
		s.ErrorRate = float64(s.Errors) / float64(n)
		s.SendSeconds = lastSent.Sub(first).Seconds()
		s.DrainSeconds = lastDone.Sub(lastSent).Seconds()
		if s.SendSeconds > 0 {
			s.AchievedRate = float64(n-1) / s.SendSeconds
		}
	}
	s.Histogram = load.Histogram(all, ok)
	s.All, s.Admitted = load.LatencyOf(all), load.LatencyOf(ok)
	return s
}

// burstCmd is `loadtest burst` (or `loadtest demo`) as its flags ask for it.
type burstCmd struct {
	Config Config
	Target stack.Endpoints // a running stack; no ProxyURL: start Stack
	Stack  stack.Options   // the local stack
	Warmup time.Duration
	Out    string // the report directory
}

// parseBurstFlags reads `loadtest burst`'s flags.
func parseBurstFlags(args []string) (burstCmd, error) {
	fs := flag.NewFlagSet("burst", flag.ExitOnError)
	c := burstCmd{Config: Config{Label: "burst"}}
	cfg := &c.Config
	fs.Float64Var(&cfg.Rate, "rate", 5000, "requests per second (constant arrival rate)")
	fs.DurationVar(&cfg.Duration, "duration", 4*time.Second, "how long to send")
	fs.IntVar(&cfg.Stock, "stock", 1000, "the voucher's uses (totalLimit)")
	fs.IntVar(&cfg.PerUser, "per-user", 1, "uses per customer (perUserLimit)")
	fs.IntVar(&cfg.Customers, "customers", 15000, "distinct customers")
	fs.Float64Var(&cfg.Retry, "retry", 0.10, "share of requests that resend an earlier orderId")
	fs.BoolVar(&cfg.Flash, "flash", true, "flash voucher (Redis gate); false: standard voucher")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the request plan")
	fs.DurationVar(&cfg.StatsWait, "stats-wait", 11*time.Second,
		"wait this long after the burst before reading Postgres commits (0: do not measure commits)")
	load.AttackFlags(fs, &cfg.Attack)
	fs.StringVar(&cfg.Record, "record", "", "write the requests sent to this traffic file (JSON lines), for `loadtest replay`")
	check := commonBurstFlags(fs, &c, "burst")
	_ = fs.Parse(args)
	return c, check()
}

// commonBurstFlags registers the flags burst and replay share: where the
// stack is (or how to start one), the reports, vegeta's results and the
// warm-up; the returned check completes c once the flags are parsed.
func commonBurstFlags(fs *flag.FlagSet, c *burstCmd, name string) (check func() error) {
	fs.StringVar(&c.Target.ProxyURL, "target", "", "proxy URL of a running stack (default: start a local stack and stop it at the end)")
	fs.StringVar(&c.Target.LedgerURL, "ledger", "", "ledger URL, with --target")
	fs.StringVar(&c.Target.DBURL, "database-url", "", "DATABASE_URL, with --target")
	fs.StringVar(&c.Target.RedisURL, "redis-url", "", "REDIS_URL, with --target")
	fs.StringVar(&c.Target.Token, "token", "dev-token", "ledger admin token (LEDGER_TOKEN)")
	fs.DurationVar(&c.Warmup, "warmup", 0, "first an unmeasured burst of this long that admits every order on another voucher (warms a fresh stack)")
	fs.StringVar(&c.Out, "out", "", "report directory (default loadtest/reports/"+name+"-<timestamp>)")
	fs.StringVar(&c.Config.Results, "vegeta", "", "also write every answer to this file in vegeta's result format (for `vegeta report`, `vegeta plot`); default <out>/results.bin")
	fs.StringVar(&c.Stack.BinDir, "bin", "", "directory holding ledger and proxy, for the local stack")
	fs.DurationVar(&c.Stack.HopDelay, "latency", 0, "for the local stack: added each way on every hop (proxy-Redis, proxy-ledger, ledger-Postgres, ledger-Redis), e.g. 0.5ms")
	var env load.MultiFlag
	fs.Var(&env, "env", "extra proxy environment for the local stack, e.g. PROXY_COALESCE=off (repeatable)")
	return func() error {
		if c.Out == "" {
			c.Out = verify.DefaultOut(name)
		}
		if c.Config.Results == "" {
			c.Config.Results = filepath.Join(c.Out, "results.bin")
		}
		c.Stack.Token, c.Stack.ProxyEnv = c.Target.Token, env
		if c.Target.ProxyURL != "" && len(env) > 0 {
			return errors.New("--env applies to the local stack only; set it on the running proxy instead")
		}
		if err := targetComplete(c.Target); err != nil {
			return err
		}
		return os.MkdirAll(filepath.Dir(c.Config.Results), 0o755)
	}
}

// targetComplete checks that a --target comes with what checking a burst
// against it needs (verify.OpenBench), and names the flags missing.
func targetComplete(e stack.Endpoints) error {
	if e.ProxyURL == "" {
		return nil
	}
	var missing []string
	for _, f := range []struct{ flag, value string }{
		{"--ledger", e.LedgerURL}, {"--database-url", e.DBURL}, {"--redis-url", e.RedisURL},
	} {
		if f.value == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--target %s also needs %s: the burst creates its voucher through the ledger and checks the outcome in the database and Redis",
			e.ProxyURL, strings.Join(missing, ", "))
	}
	return nil
}

// Run is `loadtest burst`.
func Run(ctx context.Context, args []string) error {
	c, err := parseBurstFlags(args)
	if err != nil {
		return err
	}
	return c.run(ctx)
}

// run runs the burst (or replay) on the target, or on a local stack it
// starts and stops, and writes its report.
func (c burstCmd) run(ctx context.Context) error {
	e := c.Target
	if e.ProxyURL == "" {
		fmt.Println("starting a local stack...")
		st, err := stack.Start(c.Stack)
		if err != nil {
			return err
		}
		defer st.Stop()
		e = st.Endpoints()
		c.Config.Procs = func() load.Procs { return load.WithSelf(st.Procs()) }
	}
	s, err := burstOn(ctx, e, c.Config, c.Warmup)
	if err != nil {
		return err
	}
	fmt.Printf("vegeta:  %s (vegeta report %[1]s; vegeta plot %[1]s > plot.html)\n", c.Config.Results)
	if c.Config.Record != "" {
		fmt.Printf("traffic: %s (loadtest replay %[1]s)\n", c.Config.Record)
	}
	return reportBurst(s, c.Out)
}

// burstOn runs one checked burst against e. A warm-up > 0 first runs an
// unmeasured burst that admits every order on another voucher.
func burstOn(ctx context.Context, e stack.Endpoints, cfg Config, warmup time.Duration) (*verify.Summary, error) {
	b, err := verify.OpenBench(ctx, e)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if warmup > 0 {
		if err := warmUp(ctx, b, cfg, warmup); err != nil {
			return nil, err
		}
	}
	fmt.Printf("burst: %d requests at %.0f/s for %s against %s...\n", cfg.Requests(), cfg.Rate, cfg.Duration, e.ProxyURL)
	return Send(ctx, b, cfg)
}

// reportBurst judges the burst, writes its report into dir and prints it.
// It fails when an invariant did or more than verify.MaxUnavailable of the
// answers were 503 (verify.Judge).
func reportBurst(s *verify.Summary, dir string) error {
	j := verify.Judge(s)
	s.Verdict = &j
	html, js, err := verify.WriteReport(dir, s)
	if err != nil {
		return err
	}
	verify.PrintSummary(os.Stdout, s)
	fmt.Printf("report:  %s\nsummary: %s\n", html, js)
	if !j.Pass {
		return errors.New(strings.Join(j.Reasons, "; "))
	}
	return nil
}

// warmUp opens the connections and fills the pools and caches a fresh stack
// lacks (client -> proxy -> ledger -> Postgres), so that the measured burst sees
// a running service rather than a cold start: up to 1,000 requests per second
// for d, every one admitted, on a voucher of its own. When commits are measured
// it then waits cfg.StatsWait, so that its commits are published before the
// measured burst reads the counter.
func warmUp(ctx context.Context, b *verify.Bench, cfg Config, d time.Duration) error {
	w := Config{Label: "warm-up", Rate: min(cfg.Rate, 1000), Duration: d, PerUser: 1,
		Flash: cfg.Flash, Seed: cfg.Seed + 1, Attack: cfg.Attack}
	w.Stock, w.Customers = w.Requests(), w.Requests()
	s, err := Send(ctx, b, w)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	fmt.Printf("warm-up: %d requests at %.0f/s on voucher %s (not measured): %s; p99 %.1f ms; invariants %s\n",
		s.Requests, w.Rate, s.Code, verify.StatusLine(s.Statuses), s.All.P99, verify.Verdict(s.Pass))
	if !s.Pass {
		return fmt.Errorf("warm-up: %d invariant(s) failed", failed(s.Checks))
	}
	if cfg.StatsWait > 0 {
		select {
		case <-time.After(cfg.StatsWait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func failed(cs []verify.Check) int {
	return len(slices.DeleteFunc(slices.Clone(cs), func(c verify.Check) bool { return c.Pass }))
}

// check reads the burst's outcome from the database and Redis into s and
// judges its invariants. On a log voucher a 201 is an admission in Kafka: its
// row comes when the consumer writes it, and the checks read the rows, so
// they wait for them first.
func check(ctx context.Context, b *verify.Bench, spec verify.VoucherSpec, plan load.Plan, shots []load.Shot, s *verify.Summary) error {
	if spec.WritePath == voucher.WritePathLog {
		if _, err := b.WaitUsed(ctx, spec.Code, s.AdmittedOrders, logWriteWait); err != nil {
			return err
		}
	}
	o, err := b.Outcome(ctx, spec, plan, shots)
	if err != nil {
		return err
	}
	s.DB, s.RedisRemaining = o.DB.Summary(), o.RedisRemaining()
	s.Checks = verify.Checks(o)
	s.Pass = verify.Passed(s.Checks)
	return nil
}
