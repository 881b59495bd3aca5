// Package attack is the `attack` command: it reproduces the attacks a hostile
// crowd makes on a flash sale (a flood of junk codes, a bot behind one
// address, clients that hammer 503s, flat credentials, formulas in the CSV
// export), each on a throwaway stack of its own, and judges each want of
// issue #25 with the figures it measured: PASS or FAIL per want.
package attack

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// Config is what every scenario of a run shares.
type Config struct {
	BinDir     string    // where bin/ledger and bin/proxy are
	Short      bool      // the test's smaller counts: the same wants, fewer requests
	ServiceLog io.Writer // where the services write their output; nil: stderr
}

// Scenario is one attack: what it does and how it is run and judged.
type Scenario struct {
	Name     string
	Describe string
	Run      func(ctx context.Context, cfg Config) (*Result, error)
}

// Result is one attack's figures and its verdict on each want.
type Result struct {
	Scenario string
	Figures  []string // what was measured, as printed
	Checks   []verify.Check
	Pass     bool
}

// figure adds a measured figure to r.
func (r *Result) figure(format string, args ...any) {
	r.Figures = append(r.Figures, fmt.Sprintf(format, args...))
}

// want adds the verdict on one want to r.
func (r *Result) want(name string, pass bool, format string, args ...any) {
	r.Checks = append(r.Checks, verify.NewCheck(name, pass, format, args...))
}

// finish sets the verdict from the checks: a scenario without any fails.
func (r *Result) finish() *Result {
	r.Pass = len(r.Checks) > 0 && verify.Passed(r.Checks)
	return r
}

// Scenarios are the attacks in the order `--scenario all` runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "junk", Describe: "a flat-out flood of reserves to never-created codes beside a real sale", Run: runJunk},
		{Name: "bot", Describe: "one address with thousands of made-up customerIds, real customers beside it", Run: runBot},
		{Name: "hammer", Describe: "two groups behind a shedding proxy: one retries 503s at once, one waits Retry-After", Run: runHammer},
		{Name: "creds", Describe: "scoped tokens: each token only what its scopes allow, the edge closed by default", Run: runCreds},
		{Name: "csv", Describe: "orderIds that spreadsheets evaluate, exported as CSV", Run: runCSV},
		{Name: "readyflood", Describe: "a flood of /readyz, /healthz and /metrics beside a slow ledger readiness, then real traffic", Run: runReadyFlood},
		{Name: "notoken", Describe: "reserves in a customer's name without its checkout token, and for made-up codes", Run: runNoToken},
		{Name: "retries", Describe: "300 retries of one admitted order at CLIENT_RATE=5", Run: runRetries},
		{Name: "stranger", Describe: "a stranger sends the victim's orderId under its own customer", Run: runStranger},
		{Name: "nat", Describe: "one bot's burst behind a NAT, a legitimate stream from the same address", Run: runNAT},
		{Name: "ipv6", Describe: "a bot with every address of one /64", Run: runIPv6},
		{Name: "stock", Describe: "the proxy's /metrics on its client port with edge auth on", Run: runStock},
		{Name: "secrets", Describe: "webhook URLs holding a token and user:pass@ fail: their secrets in no log line and no answer", Run: runSecrets},
		{Name: "ledger-closed", Describe: "a ledger started without a token or with pprof on every interface, and its open /metrics read for a scheduled code", Run: runClosed},
		{Name: "ledger-readyz", Describe: "64 clients flood the ledger's open /readyz while customers reserve beside them", Run: runLedgerReadyz},
		{Name: "exports", Describe: "40 readers start the CSV export of a big voucher and read nothing, real customers reserving beside them", Run: runExports},
	}
}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string { return load.Names(Scenarios()) }

// ScenarioName and OnlyByName make a Scenario a load.Named (every attack
// runs in all).
func (s Scenario) ScenarioName() string { return s.Name }
func (s Scenario) OnlyByName() bool     { return false }

// pickScenarios returns the named scenarios; none or "all" is every one.
func pickScenarios(names []string) ([]Scenario, error) { return load.Pick(Scenarios(), names) }

// Run is `loadtest attack`.
func Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("attack", flag.ExitOnError)
	var picked load.MultiFlag
	fs.Var(&picked, "scenario", "run this attack (repeatable; default all): "+strings.Join(ScenarioNames(), ", ")+", all")
	var cfg Config
	fs.BoolVar(&cfg.Short, "short", false, "the test's smaller counts (the same wants)")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory holding ledger and proxy (default: beside loadtest)")
	logPath := fs.String("log", "", "write the services' output to this file (default: discarded)")
	_ = fs.Parse(args)
	scenarios, err := pickScenarios(picked)
	if err != nil {
		return err
	}
	cfg.ServiceLog = io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.ServiceLog = f
	}
	load.RaiseOpenFiles()
	failed := 0
	for _, sc := range scenarios {
		fmt.Printf("%s: %s\n", sc.Name, sc.Describe)
		res, err := sc.Run(ctx, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			fmt.Printf("  ERROR %v\n", err)
			failed++
			continue
		}
		PrintResult(os.Stdout, res)
		if !res.Pass {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d attacks failed a want", failed, len(scenarios))
	}
	return nil
}

// PrintResult writes res's figures and a PASS or FAIL line per want.
func PrintResult(w io.Writer, res *Result) {
	for _, f := range res.Figures {
		fmt.Fprintf(w, "  %s\n", f)
	}
	for _, c := range res.Checks {
		fmt.Fprintf(w, "  %s %s: %s\n", verify.Verdict(c.Pass), c.Name, c.Detail)
	}
	fmt.Fprintf(w, "  => %s %s\n", res.Scenario, verify.Verdict(res.Pass))
}

// errNotUp is a scenario's stack that would not start.
var errNotUp = errors.New("the stack did not start")
