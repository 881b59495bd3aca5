// Command loadtest runs flashgate locally and hammers it: `run` brings the
// stack up in the foreground; `burst`, `demo` and `compare` send flash-sale
// traffic against it (`replay` sends a recorded file's) at a constant arrival rate (vegeta, open model) and check
// the invariants against the database and Redis; `chaos` injects faults
// (toxiproxy between the services and Redis and Postgres, kill -9 of every
// process) under such bursts and checks the invariants and the recovery;
// `attack` reproduces a hostile crowd's attacks and judges each want;
// `ceiling` is the bare HTTP server that compare measures the proxy against.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/flashgate/flashgate/loadtest/internal/attack"
	"github.com/flashgate/flashgate/loadtest/internal/burst"
	"github.com/flashgate/flashgate/loadtest/internal/chaos"
	"github.com/flashgate/flashgate/loadtest/internal/compare"
	"github.com/flashgate/flashgate/shared/buildinfo"
)

// usage writes the commands to w: stdout when asked for (--help), stderr
// beside an error.
func usage(w io.Writer) {
	fmt.Fprint(w, `usage: loadtest <command> [flags]
       loadtest --help | --version

commands:
  run       start Redis, Postgres, the ledger and the proxy on throwaway servers, on free ports with a
            random token (--env-file FILE writes them for a shell to source); Ctrl-C stops all
  demo      a throwaway stack and a 1,000-use flash sale on it, checked; prints the report's path
  burst     one burst at a constant rate against a fresh voucher, checked against Postgres and Redis
            (--record FILE writes its traffic; every answer also goes to vegeta's results format)
  replay    send a recorded traffic file (JSON lines) at its recorded times (--speed x) to a fresh
            voucher, checked as a burst is
  compare   each path's maximum sustainable rate and its latency at one fixed rate, side by side
  chaos     faults under bursts (Redis, Postgres, ledger, proxy): invariants and recovery time per scenario
            (--scenario log-sale: a 50,000-use writePath log voucher sold through a ledger kill -9 and
            a broker restart, its 201s = Postgres = Redis checked order for order, the reconciler on;
            --ledgers 2 for two consuming ledgers, --broker-down 40s for a longer outage)
  attack    hostile traffic, each attack on a stack of its own (--scenario junk|bot|hammer|creds|csv|all):
            the measured figures and PASS/FAIL per want (--short: the test's smaller counts)
  ceiling   a bare gin server answering every reserve 409 (the HTTP ceiling compare measures)
  solution1 the article's one-transaction-per-reservation guarded UPDATE as a server (compare's solution1 path)
  floor     what an admitted request must cost each process at least: batched script calls, ledger calls, rows
  floor-ledger  the ledger-like batch server that floor measures

Run "loadtest <command> -h" for a command's flags.
`)
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	commands := map[string]func(context.Context, []string) error{
		"run": runStack, "demo": burst.RunDemo, "burst": burst.Run, "replay": burst.RunReplay, "compare": compare.Run, "chaos": chaos.Run, "attack": attack.Run, "ceiling": compare.RunCeiling,
		"solution1": compare.RunSolution1, "floor": compare.RunFloor, "floor-ledger": compare.RunFloorLedger,
	}
	cmd, args := os.Args[1], os.Args[2:]
	run, ok := commands[cmd]
	switch {
	case cmd == "-h" || cmd == "-help" || cmd == "--help" || cmd == "help":
		usage(os.Stdout)
		return
	case cmd == "-version" || cmd == "--version" || cmd == "version":
		fmt.Printf("loadtest %s (revision %s)\n", buildinfo.Version(), buildinfo.Revision())
		return
	case !ok:
		fmt.Fprintf(os.Stderr, "loadtest: unknown command %q\n", cmd)
		usage(os.Stderr)
		os.Exit(2)
	}
	err := run(ctx, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
