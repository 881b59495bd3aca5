package burst

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// parseDemoFlags reads `loadtest demo`'s flags.
func parseDemoFlags(args []string) burstCmd {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	c := burstCmd{Config: Config{Label: "demo", Flash: true, PerUser: 1, Seed: 1}, Stack: stack.Options{Token: "dev-token"}}
	cfg := &c.Config
	fs.Float64Var(&cfg.Rate, "rate", 5000, "requests per second")
	fs.DurationVar(&cfg.Duration, "duration", 4*time.Second, "how long to send")
	fs.IntVar(&cfg.Stock, "stock", 1000, "the voucher's uses")
	fs.IntVar(&cfg.Customers, "customers", 15000, "distinct customers")
	fs.Float64Var(&cfg.Retry, "retry", 0.10, "share of requests that resend an earlier orderId")
	fs.DurationVar(&cfg.StatsWait, "stats-wait", 11*time.Second, "wait before reading Postgres commits (0: skip)")
	load.AttackFlags(fs, &cfg.Attack)
	fs.DurationVar(&c.Warmup, "warmup", 0, "first an unmeasured burst of this long on another voucher (the stack is fresh: cold start included by default)")
	fs.StringVar(&c.Out, "out", "", "report directory (default loadtest/reports/demo-<timestamp>)")
	fs.StringVar(&c.Stack.BinDir, "bin", "", "directory holding ledger and proxy")
	fs.BoolVar(&c.Stack.DurablePG, "durable", false, "Postgres with fsync and full_page_writes on: every 201 is on disk (make demo sets it)")
	fs.DurationVar(&c.Stack.HopDelay, "latency", 0, "added each way on every hop (proxy-Redis, proxy-ledger, ledger-Postgres, ledger-Redis), e.g. 0.5ms for a datacentre's network")
	_ = fs.Parse(args)
	if c.Out == "" {
		c.Out = verify.DefaultOut("demo")
	}
	return c
}

// RunDemo is `loadtest demo` (and `make demo`): a throwaway stack and one flash
// sale on it, 1,000 uses for a crowd, checked against the database and Redis.
func RunDemo(ctx context.Context, args []string) error {
	c := parseDemoFlags(args)
	fmt.Println("starting Redis, Postgres, the ledger and the proxy on throwaway servers...")
	st, err := stack.Start(c.Stack)
	if err != nil {
		return err
	}
	defer st.Stop()
	cfg := c.Config
	fmt.Printf("a flash sale: %d uses, %d customers, %.0f%% retries, %d requests at %.0f/s; Postgres %s\n",
		cfg.Stock, cfg.Customers, 100*cfg.Retry, cfg.Requests(), cfg.Rate, stack.Durability(c.Stack.DurablePG))
	if c.Stack.HopDelay > 0 {
		fmt.Printf("every hop between the services and their servers: %s added each way\n", c.Stack.HopDelay)
	}
	if cfg.StatsWait > 0 {
		fmt.Printf("(after the burst the demo waits %s for Postgres to publish its commit counters)\n", cfg.StatsWait)
	}
	cfg.Procs = func() load.Procs { return load.WithSelf(st.Procs()) }
	s, err := burstOn(ctx, st.Endpoints(), cfg, c.Warmup)
	if err != nil {
		return err
	}
	err = reportBurst(s, c.Out)
	if line := stackCPULine(s); line != "" {
		fmt.Println(line)
	}
	return err
}

// stackCPULine says what the stack (every process but the generator) spent
// in CPU per admitted request over the burst, refusals included, since the
// sale's refusals are what its admissions cost: "" when not measured.
func stackCPULine(s *verify.Summary) string {
	if s.CPU == nil || s.CPU.PerRequestUs == nil || s.AdmittedOrders == 0 {
		return ""
	}
	n := float64(s.Requests) / float64(s.AdmittedOrders)
	var all float64
	var parts []string
	for _, name := range load.ProcNames([]map[string]float64{s.CPU.PerRequestUs}, load.ReportOrder...) {
		if name == load.SelfProc || name == load.AllProcs {
			continue
		}
		us := s.CPU.PerRequestUs[name] * n
		all += us
		parts = append(parts, fmt.Sprintf("%s %.0f", name, us))
	}
	return fmt.Sprintf("stack CPU per admitted request: %.0f us (%s; %d requests for %d admitted), load generator %.0f us per request sent",
		all, strings.Join(parts, ", "), s.Requests, s.AdmittedOrders, s.CPU.PerRequestUs[load.SelfProc])
}
