package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// runDemo is `loadtest demo` (and `make demo`): a throwaway stack and one flash
// sale on it, 1,000 uses for a crowd, checked against the database and Redis.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	cfg := BurstConfig{Label: "demo", Flash: true, PerUser: 1, Seed: 1}
	fs.Float64Var(&cfg.Rate, "rate", 5000, "requests per second")
	fs.DurationVar(&cfg.Duration, "duration", 4*time.Second, "how long to send")
	fs.IntVar(&cfg.Stock, "stock", 1000, "the voucher's uses")
	fs.IntVar(&cfg.Customers, "customers", 15000, "distinct customers")
	fs.Float64Var(&cfg.Retry, "retry", 0.10, "share of requests that resend an earlier orderId")
	fs.DurationVar(&cfg.StatsWait, "stats-wait", 11*time.Second, "wait before reading Postgres commits (0: skip)")
	attackFlags(fs, &cfg.Attack)
	warmup := fs.Duration("warmup", 0, "first an unmeasured burst of this long on another voucher (the stack is fresh: cold start included by default)")
	out := fs.String("out", "", "report directory (default loadtest/reports/demo-<timestamp>)")
	binDir := fs.String("bin", "", "directory holding ledger and proxy")
	_ = fs.Parse(args)
	if *out == "" {
		*out = defaultOut("demo")
	}

	fmt.Println("starting Redis, Postgres, the ledger and the proxy on throwaway servers...")
	st, err := StartStack(StackOptions{BinDir: *binDir, Token: "dev-token"})
	if err != nil {
		return err
	}
	defer st.Stop()
	fmt.Printf("a flash sale: %d uses, %d customers, %.0f%% retries, %d requests at %.0f/s\n",
		cfg.Stock, cfg.Customers, 100*cfg.Retry, cfg.Requests(), cfg.Rate)
	if cfg.StatsWait > 0 {
		fmt.Printf("(after the burst the demo waits %s for Postgres to publish its commit counters)\n", cfg.StatsWait)
	}
	return burstAndReport(ctx, st.Endpoints(), cfg, *warmup, *out)
}
