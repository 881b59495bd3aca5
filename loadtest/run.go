package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
)

// stackWired names the settings the stack gives its services itself: the same
// names in loadtest's environment (`make run REDIS_URL=...`) do not reach them.
var stackWired = []string{"LEDGER_ADDR", "PROXY_ADDR", "DATABASE_URL", "REDIS_URL", "LEDGER_URL", "LEDGER_TOKEN", "PROXY_AUTH"}

// runStack is `make run`: the stack in the foreground until Ctrl-C. Every
// other setting in its environment reaches both services (they inherit it),
// so `make run CHECKOUT_TOKEN_SECRET=... RESERVATION_TTL=2m` configures them.
func runStack(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	binDir := fs.String("bin", "", "directory holding ledger and proxy (default: beside loadtest)")
	ledgerAddr := fs.String("ledger-addr", "", "ledger listen address (default: a free port on 127.0.0.1)")
	proxyAddr := fs.String("proxy-addr", "", "proxy listen address (default: a free port on 127.0.0.1)")
	token := fs.String("token", "", "LEDGER_TOKEN for the ledger and the proxy (default: a random one)")
	envFile := fs.String("env-file", "", "write FLASHGATE_PROXY, FLASHGATE_LEDGER, FLASHGATE_TOKEN (and CHECKOUT_TOKEN_SECRET when set)\n"+
		"to this file, mode 0600, for a shell to source; removed when the stack stops")
	durable := fs.Bool("durable", false, "Postgres with fsync and full_page_writes on")
	dbURL := fs.String("database-url", "", "use this Postgres instead of a throwaway one")
	redisURL := fs.String("redis-url", "", "use this Redis instead of a throwaway one")
	_ = fs.Parse(args)
	if *token == "" {
		// Random even on loopback: PROXY_ADDR or LEDGER_ADDR may bind every
		// interface, and another user of this machine reaches loopback too.
		*token = rand.Text()
	}
	for _, name := range stackWired {
		if _, ok := os.LookupEnv(name); ok {
			fmt.Fprintf(os.Stderr, "loadtest run: %s in the environment is ignored: the stack sets it (see loadtest run -h)\n", name)
		}
	}

	// stack.Start fails, with the service's log, when a service exits during
	// its start (its port taken, say): its health check counts only an answer
	// from the child itself (/healthz names its pid).
	st, err := stack.Start(stack.Options{BinDir: *binDir, Token: *token, LedgerAddr: *ledgerAddr, ProxyAddr: *proxyAddr,
		ExternalDB: *dbURL, ExternalRDB: *redisURL, DurablePG: *durable})
	if err != nil {
		return err
	}
	defer st.Stop()
	vars := []stack.EnvVar{{Name: "FLASHGATE_PROXY", Value: st.ProxyURL}, {Name: "FLASHGATE_LEDGER", Value: st.LedgerURL},
		{Name: "FLASHGATE_TOKEN", Value: st.Token}}
	if secret, ok := os.LookupEnv("CHECKOUT_TOKEN_SECRET"); ok {
		vars = append(vars, stack.EnvVar{Name: "CHECKOUT_TOKEN_SECRET", Value: secret})
	}
	fmt.Printf(`flashgate is up (Ctrl-C stops everything and removes the data)
  proxy:    %s   (PROXY_AUTH=off: no client token, a local stack only)
  ledger:   %s   (its admin token, LEDGER_TOKEN: FLASHGATE_TOKEN below)
  redis:    %s
  postgres: %s (%s)
`, st.ProxyURL, st.LedgerURL, st.RedisURL, st.DBURL, stack.Durability(*durable))
	if *envFile != "" {
		remove, err := stack.WriteEnvFile(*envFile, fmt.Sprintf("flashgate's `make run` (loadtest run, pid %d): . %s\nRemoved when it stops.",
			os.Getpid(), *envFile), vars)
		if err != nil {
			return err
		}
		defer remove()
		fmt.Printf("In another shell, from this directory: . %s\n", *envFile)
	}
	fmt.Print(stack.Exports(vars))
	<-ctx.Done()
	fmt.Println("stopping...")
	return nil
}
