package devstacktest

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// FlashgateOptions configures StartFlashgate.
type FlashgateOptions struct {
	LedgerToken string   // LEDGER_TOKEN; the proxy sends it; empty (and no LEDGER_TOKENS): LEDGER_AUTH=off
	ProxyToken  string   // PROXY_TOKEN: required from the proxy's clients; empty: an open edge (devstack.OpenEdge)
	LedgerEnv   []string // more of the ledger's environment
	ProxyEnv    []string // more of the proxy's environment
	Log         io.Writer
}

// Flashgate is a whole stack for a test package: its own redis-server and
// PostgreSQL, and bin/ledger and bin/proxy (built once) on free ports.
type Flashgate struct {
	LedgerURL, ProxyURL string
	Ledger, Proxy       *devstack.Service
	redis               *devstack.Redis
	postgres            *devstack.Postgres
}

// StartFlashgate starts a stack. It takes no testing.TB so that TestMain can
// start one for a package's examples; Stop removes it.
func StartFlashgate(o FlashgateOptions) (f *Flashgate, err error) {
	f = &Flashgate{}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	if o.Log == nil {
		o.Log = io.Discard
	}
	bin, err := buildBinaries("github.com/flashgate/flashgate/ledger", "github.com/flashgate/flashgate/proxy")
	if err != nil {
		return f, err
	}
	if f.redis, err = devstack.StartRedis(devstack.RedisOptions{}); err != nil {
		return f, err
	}
	if f.postgres, err = devstack.StartPostgres(devstack.PostgresOptions{}); err != nil {
		return f, err
	}
	f.Ledger, f.LedgerURL, err = startOnFreePort("ledger", filepath.Join(bin, "ledger"), "LEDGER_ADDR", append([]string{
		"DATABASE_URL=" + f.postgres.URL(), "REDIS_URL=" + f.redis.URL(), devstack.LedgerAuth(o.LedgerToken, o.LedgerEnv),
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	}, o.LedgerEnv...), o.Log)
	if err != nil {
		return f, err
	}
	edge := "PROXY_TOKEN=" + o.ProxyToken
	if o.ProxyToken == "" {
		edge = devstack.OpenEdge
	}
	f.Proxy, f.ProxyURL, err = startOnFreePort("proxy", filepath.Join(bin, "proxy"), "PROXY_ADDR", append([]string{
		"REDIS_URL=" + f.redis.URL(), "LEDGER_URL=" + f.LedgerURL, "LEDGER_TOKEN=" + o.LedgerToken, edge,
	}, o.ProxyEnv...), o.Log)
	return f, err
}

// startOnFreePort runs binary on a free loopback port given in addrVar.
func startOnFreePort(name, binary, addrVar string, env []string, log io.Writer) (*devstack.Service, string, error) {
	port, err := devstack.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	env = append(env, addrVar+"="+addr, "SHUTDOWN_DELAY=0s") // no load balancer to wait for
	svc, err := devstack.StartService(name, binary, env, "http://"+addr+api.HealthzPath, log)
	if err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	return svc, "http://" + addr, nil
}

// RedisURL is the URL of the stack's redis-server, for a test that reads what
// the services wrote (the agreement check).
func (f *Flashgate) RedisURL() string { return f.redis.URL() }

// DatabaseURL is the URL of the stack's PostgreSQL.
func (f *Flashgate) DatabaseURL() string { return f.postgres.URL() }

// Stop stops everything StartFlashgate started.
func (f *Flashgate) Stop() error {
	var errs []error
	for _, s := range []interface{ Stop() error }{f.Proxy, f.Ledger, f.postgres, f.redis} {
		if s != nil && !isNilService(s) {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}

func isNilService(s interface{ Stop() error }) bool {
	switch v := s.(type) {
	case *devstack.Service:
		return v == nil
	case *devstack.Postgres:
		return v == nil
	case *devstack.Redis:
		return v == nil
	}
	return false
}
