// Command loadtest runs flashgate locally and hammers it: `run` brings the
// stack up in the foreground; the burst, compare and chaos subcommands replay
// flash-sale traffic and faults against it and check the invariants against
// the database and Redis.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage: loadtest <command> [flags]

commands:
  run       start Redis, Postgres, the ledger and the proxy on throwaway servers; Ctrl-C stops all
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "run":
		err = runStack(ctx, args)
	case "-h", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "loadtest: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// runStack is `make run`: the stack in the foreground until Ctrl-C.
func runStack(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	binDir := fs.String("bin", "", "directory holding ledger and proxy (default: beside loadtest)")
	ledgerAddr := fs.String("ledger-addr", "127.0.0.1:8081", "ledger listen address")
	proxyAddr := fs.String("proxy-addr", "127.0.0.1:8080", "proxy listen address")
	token := fs.String("token", "dev-token", "LEDGER_TOKEN for the ledger and the proxy")
	_ = fs.Parse(args)

	st, err := StartStack(StackOptions{BinDir: *binDir, Token: *token, LedgerAddr: *ledgerAddr, ProxyAddr: *proxyAddr})
	if err != nil {
		return err
	}
	defer st.Stop()
	fmt.Printf(`flashgate is up (Ctrl-C stops everything and removes the data)
  proxy:    %s
  ledger:   %s   (LEDGER_TOKEN=%s)
  redis:    %s
  postgres: %s
`, st.ProxyURL, st.LedgerURL, st.Token, st.RedisURL, st.DBURL)
	<-ctx.Done()
	fmt.Println("stopping...")
	return nil
}
