// Package stack starts flashgate on throwaway servers: Redis, Postgres, a
// ledger and a proxy, and says where they answer (Endpoints).
package stack

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// Options configures a local flashgate stack.
type Options struct {
	BinDir      string    // where bin/ledger and bin/proxy are
	Token       string    // LEDGER_TOKEN shared by ledger and proxy; empty (and no LEDGER_TOKENS in LedgerEnv): LEDGER_AUTH=off
	DurablePG   bool      // fsync on, as in production
	PGSettings  []string  // more settings of the throwaway Postgres, "name=value" each
	RedisAOF    bool      // appendonly yes, appendfsync everysec
	LedgerEnv   []string  // extra env for the ledger
	ProxyEnv    []string  // extra env for the proxy
	LedgerAddr  string    // default a free port
	ProxyAddr   string    // default a free port
	ExternalDB  string    // use this DATABASE_URL instead of a throwaway server
	ExternalRDB string    // use this REDIS_URL instead of a throwaway server
	ServiceLog  io.Writer // where the ledger's and proxy's output goes; nil: stderr
	// AdmissionsLog starts an in-process Kafka (kfake) and gives the ledger
	// KAFKA_ADMISSIONS_BROKERS, for vouchers with writePath log.
	AdmissionsLog bool
	// AdmissionsLogOnDisk keeps that Kafka's log in a directory of its own
	// (every produce synced before its ack; removed by Stop), so that
	// RestartKafka brings it back; otherwise it is in memory.
	AdmissionsLogOnDisk bool

	// The services' own view of their dependencies, when it differs from the
	// servers' (the chaos harness routes it through fault-injecting proxies):
	// empty means the server itself. The harness's checks always read the
	// servers directly.
	LedgerDBURL    string // DATABASE_URL given to the ledger
	LedgerRedisURL string // REDIS_URL given to the ledger
	ProxyRedisURL  string // REDIS_URL given to the proxy
	ProxyLedgerURL string // LEDGER_URL given to the proxy (e.g. a balancer over several ledgers)

	// HopDelay, when above 0, is added each way on every hop the services
	// use (proxy-Redis, proxy-ledger, ledger-Postgres, ledger-Redis), through a
	// DelayLink each: the network of a real deployment, on loopback.
	HopDelay time.Duration
}

// Stack is a throwaway Redis and Postgres with a ledger and a proxy on them.
type Stack struct {
	Redis                 *devstack.Redis    // nil when external
	Postgres              *devstack.Postgres // nil when external
	Ledger, Proxy         *devstack.Service
	Kafka                 *kfake.Cluster // nil unless Options.AdmissionsLog
	RedisURL, DBURL       string
	LedgerURL, ProxyURL   string
	LedgerAddr, ProxyAddr string
	Token                 string

	proxyBin, ledgerBin string
	ledgerEnv           []string            // the first ledger's environment, for StartLedger
	proxyEnv            []string            // the first proxy's environment, for StartProxyLike
	serviceLog          io.Writer           // every service's output, restarts included
	extra               []*devstack.Service // services started by StartProxy and StartLedger
	kafkaOpts           []kfake.Opt         // the Kafka's, for RestartKafka
	kafkaDir            string              // its log, with Options.AdmissionsLogOnDisk
	links               []*Relay            // Options.HopDelay's hops
}

// Start starts everything and waits until both services answer.
func Start(o Options) (s *Stack, err error) {
	s = &Stack{Token: o.Token, serviceLog: o.ServiceLog}
	if s.serviceLog == nil {
		s.serviceLog = os.Stderr
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if s.RedisURL = o.ExternalRDB; s.RedisURL == "" {
		if s.Redis, err = devstack.StartRedis(devstack.RedisOptions{AOF: o.RedisAOF}); err != nil {
			return s, err
		}
		s.RedisURL = s.Redis.URL()
	}
	if s.DBURL = o.ExternalDB; s.DBURL == "" {
		if s.Postgres, err = devstack.StartPostgres(devstack.PostgresOptions{Durable: o.DurablePG, Settings: o.PGSettings}); err != nil {
			return s, err
		}
		s.DBURL = s.Postgres.URL()
	}
	if s.LedgerAddr, err = AddrOr(o.LedgerAddr); err != nil {
		return s, err
	}
	if s.ProxyAddr, err = AddrOr(o.ProxyAddr); err != nil {
		return s, err
	}
	s.LedgerURL, s.ProxyURL = "http://"+s.LedgerAddr, "http://"+s.ProxyAddr
	if o.HopDelay > 0 {
		if o, err = s.delayHops(o); err != nil {
			return s, err
		}
	}
	if o.AdmissionsLog {
		if err = s.startKafka(o.AdmissionsLogOnDisk); err != nil {
			return s, err
		}
		o.LedgerEnv = append([]string{"KAFKA_ADMISSIONS_BROKERS=" + strings.Join(s.Kafka.ListenAddrs(), ",")}, o.LedgerEnv...)
	}
	ledgerBin, proxyBin, err := binaries(o.BinDir)
	if err != nil {
		return s, err
	}
	s.proxyBin, s.ledgerBin = proxyBin, ledgerBin
	env := append([]string{"LEDGER_ADDR=" + s.LedgerAddr, "DATABASE_URL=" + cmp.Or(o.LedgerDBURL, s.DBURL),
		"REDIS_URL=" + cmp.Or(o.LedgerRedisURL, s.RedisURL), devstack.LedgerAuth(o.Token, o.LedgerEnv)}, o.LedgerEnv...)
	s.ledgerEnv = env
	if s.Ledger, err = devstack.StartService("ledger", ledgerBin, env, s.LedgerURL+api.HealthzPath, s.serviceLog); err != nil {
		return s, err
	}
	env = append([]string{"PROXY_ADDR=" + s.ProxyAddr, "REDIS_URL=" + cmp.Or(o.ProxyRedisURL, s.RedisURL),
		"LEDGER_URL=" + cmp.Or(o.ProxyLedgerURL, s.LedgerURL), "LEDGER_TOKEN=" + o.Token, devstack.OpenEdge}, o.ProxyEnv...)
	s.proxyEnv = env
	if s.Proxy, err = devstack.StartService("proxy", proxyBin, env, s.ProxyURL+api.HealthzPath, s.serviceLog); err != nil {
		return s, err
	}
	return s, nil
}

// StartProxy starts one more proxy on a free port, in front of the same ledger
// and Redis, with env added to the usual environment (e.g. PROXY_COALESCE=off).
// It returns the proxy's URL; Stop stops it with the rest.
func (s *Stack) StartProxy(name string, env ...string) (string, error) {
	addr, err := AddrOr("")
	if err != nil {
		return "", err
	}
	env = append([]string{"PROXY_ADDR=" + addr, "REDIS_URL=" + s.RedisURL,
		"LEDGER_URL=" + s.LedgerURL, "LEDGER_TOKEN=" + s.Token, devstack.OpenEdge}, env...)
	svc, err := devstack.StartService(name, s.proxyBin, env, "http://"+addr+api.HealthzPath, s.serviceLog)
	if err != nil {
		return "", err
	}
	s.extra = append(s.extra, svc)
	return "http://" + addr, nil
}

// StartProxyLike starts one more proxy at addr (a free port when empty) with
// the first proxy's environment plus env: the same Redis and ledger as it
// sees them. It returns the service, to stop and restart, and its URL; Stop
// stops it with the rest.
func (s *Stack) StartProxyLike(name, addr string, env ...string) (*devstack.Service, string, error) {
	addr, err := AddrOr(addr)
	if err != nil {
		return nil, "", err
	}
	env = append(append(slices.Clone(s.proxyEnv), "PROXY_ADDR="+addr), env...)
	svc, err := devstack.StartService(name, s.proxyBin, env, "http://"+addr+api.HealthzPath, s.serviceLog)
	if err != nil {
		return nil, "", err
	}
	s.extra = append(s.extra, svc)
	return svc, "http://" + addr, nil
}

// StartLedger starts one more ledger at addr (a free port when empty) on the
// same database and Redis, with the first ledger's environment plus env. It
// returns the service, to kill and restart, and its URL; Stop stops it with
// the rest.
func (s *Stack) StartLedger(name, addr string, env ...string) (*devstack.Service, string, error) {
	addr, err := AddrOr(addr)
	if err != nil {
		return nil, "", err
	}
	// A later entry of the same variable wins (os/exec keeps the last).
	env = append(append(slices.Clone(s.ledgerEnv), "LEDGER_ADDR="+addr), env...)
	svc, err := devstack.StartService(name, s.ledgerBin, env, "http://"+addr+api.HealthzPath, s.serviceLog)
	if err != nil {
		return nil, "", err
	}
	s.extra = append(s.extra, svc)
	return svc, "http://" + addr, nil
}

// Endpoints returns where the stack's parts listen.
func (s *Stack) Endpoints() Endpoints {
	return Endpoints{ProxyURL: s.ProxyURL, LedgerURL: s.LedgerURL, DBURL: s.DBURL, RedisURL: s.RedisURL, Token: s.Token}
}

// Stop stops the services and the servers and removes their data. The
// services are killed, not drained: their data goes with them, and a graceful
// stop would wait SHUTDOWN_DELAY for a load balancer there is none of.
func (s *Stack) Stop() {
	for _, svc := range append(slices.Clone(s.extra), s.Proxy, s.Ledger) {
		if svc != nil {
			_ = svc.Kill()
			svc.Stop()
		}
	}
	if s.Kafka != nil {
		s.Kafka.Close()
	}
	if s.kafkaDir != "" {
		_ = os.RemoveAll(s.kafkaDir)
	}
	if s.Postgres != nil {
		s.Postgres.Stop()
	}
	if s.Redis != nil {
		s.Redis.Stop()
	}
	for _, l := range s.links {
		l.Close()
	}
}

// AddrOr is addr, or a free port on 127.0.0.1 when addr is empty.
func AddrOr(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	port, err := devstack.FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// binaries finds bin/ledger and bin/proxy: in dir if given, else beside this
// executable, else in ./bin.
func binaries(dir string) (ledger, proxy string, err error) {
	var dirs []string
	if dir != "" {
		dirs = append(dirs, dir)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	dirs = append(dirs, "bin")
	for _, d := range dirs {
		l, p := filepath.Join(d, "ledger"), filepath.Join(d, "proxy")
		if isFile(l) && isFile(p) {
			return l, p, nil
		}
	}
	return "", "", errors.New("bin/ledger and bin/proxy not found: run `make build` first")
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// delayHops puts a DelayLink on each hop o leaves to the servers themselves,
// and returns o with the services pointed at them.
func (s *Stack) delayHops(o Options) (Options, error) {
	for _, hop := range []struct {
		url  *string
		from string
	}{
		{&o.LedgerDBURL, s.DBURL}, {&o.LedgerRedisURL, s.RedisURL},
		{&o.ProxyRedisURL, s.RedisURL}, {&o.ProxyLedgerURL, s.LedgerURL},
	} {
		if *hop.url != "" {
			continue
		}
		u, err := url.Parse(hop.from)
		if err != nil {
			return o, fmt.Errorf("hop to %s: %w", hop.from, err)
		}
		l, err := StartDelayLink(u.Host, o.HopDelay)
		if err != nil {
			return o, err
		}
		s.links = append(s.links, l)
		if *hop.url, err = hopURL(hop.from, l.Addr()); err != nil {
			return o, err
		}
	}
	return o, nil
}

// Endpoints locate a running flashgate.
type Endpoints struct {
	ProxyURL, LedgerURL string
	DBURL, RedisURL     string
	Token               string // the ledger's admin token
}

// Durability says how the dev stack's Postgres keeps a commit.
func Durability(durable bool) string {
	if durable {
		return "durable (fsync and full_page_writes on: every 201 is on disk)"
	}
	return "fsync off (a commit survives a process crash, not a machine crash)"
}

// Procs names the processes the stack runs, by pid, for reading their CPU
// time: "redis", "postgres" (the postmaster; its backends are its children),
// "ledger", "proxy" and every service StartProxy or StartLedger added, by its
// name. A server that is external or not running is left out.
func (s *Stack) Procs() map[string]int {
	out := map[string]int{}
	add := func(name string, pid int) {
		if pid > 0 {
			out[name] = pid
		}
	}
	if s.Redis != nil {
		add("redis", s.Redis.Pid())
	}
	if s.Postgres != nil {
		add("postgres", s.Postgres.Pid())
	}
	for _, svc := range append([]*devstack.Service{s.Ledger, s.Proxy}, s.extra...) {
		if svc != nil {
			add(svc.Name, svc.Pid())
		}
	}
	return out
}
