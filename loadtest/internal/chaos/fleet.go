package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// fleetEnv is what every instance of a fleet runs with beside the chaos
// settings: a second of SHUTDOWN_DELAY is ten of the balancers' readiness
// checks, so new connections have moved away before an instance stops
// accepting. SHUTDOWN_TIMEOUT keeps its default: a drain that takes more than
// devstack's 10 s before SIGKILL fails the restart.
var fleetEnv = []string{"SHUTDOWN_DELAY=1s"}

// restartReadyBound is how long a restarted instance may take to be seen
// ready by its balancer before the rolling restart gives up.
const restartReadyBound = 10 * time.Second

// fleet is two proxies and two ledgers, each pair behind a balancer that
// follows /readyz: clients send to the proxies' balancer, the proxies to the
// ledgers'.
type fleet struct {
	proxyLB, ledgerLB *balancer
	ledgerAddrs       [2]string
	proxyAddrs        [2]string
	members           []member // in the order a rolling restart takes them
}

// member is one instance of a fleet and the balancer in front of it.
type member struct {
	svc  *devstack.Service
	addr string
	lb   *balancer
}

// planFleet picks the four instances' addresses, starts both balancers and
// points o at them; startFleet starts the second ledger and proxy once o's
// stack is up.
func (r *rig) planFleet(o *stack.Options) error {
	f := &fleet{}
	r.fleet = f
	for _, a := range []*string{&f.ledgerAddrs[0], &f.ledgerAddrs[1], &f.proxyAddrs[0], &f.proxyAddrs[1]} {
		var err error
		if *a, err = stack.AddrOr(""); err != nil {
			return err
		}
	}
	var err error
	if f.ledgerLB, err = startBalancer(f.ledgerAddrs[:]...); err != nil {
		return err
	}
	if f.proxyLB, err = startBalancer(f.proxyAddrs[:]...); err != nil {
		return err
	}
	f.ledgerLB.followReadiness()
	f.proxyLB.followReadiness()
	o.LedgerAddr, o.ProxyAddr = f.ledgerAddrs[0], f.proxyAddrs[0]
	o.ProxyLedgerURL = "http://" + f.ledgerLB.Addr()
	o.LedgerEnv = append(o.LedgerEnv, fleetEnv...)
	o.ProxyEnv = append(o.ProxyEnv, fleetEnv...)
	return nil
}

func (r *rig) startFleet(ctx context.Context) error {
	f := r.fleet
	ledgerB, urlB, err := r.st.StartLedger("ledger-b", f.ledgerAddrs[1])
	if err != nil {
		return err
	}
	r.ledgerB, r.ledgerURLs = ledgerB, append(r.ledgerURLs, urlB)
	proxyB, _, err := r.st.StartProxyLike("proxy-b", f.proxyAddrs[1])
	if err != nil {
		return err
	}
	r.st.Ledger.Name, r.st.Proxy.Name = "ledger-a", "proxy-a"
	f.members = []member{
		{r.st.Ledger, f.ledgerAddrs[0], f.ledgerLB}, {ledgerB, f.ledgerAddrs[1], f.ledgerLB},
		{r.st.Proxy, f.proxyAddrs[0], f.proxyLB}, {proxyB, f.proxyAddrs[1], f.proxyLB},
	}
	for _, m := range f.members {
		if err := m.lb.waitReady(ctx, m.addr, restartReadyBound); err != nil {
			return err
		}
	}
	return nil
}

// endpoints is where the harness sends: the balancers.
func (f *fleet) endpoints(e stack.Endpoints) stack.Endpoints {
	e.ProxyURL, e.LedgerURL = "http://"+f.proxyLB.Addr(), "http://"+f.ledgerLB.Addr()
	return e
}

func (f *fleet) Close() {
	for _, lb := range []*balancer{f.proxyLB, f.ledgerLB} {
		if lb != nil {
			lb.Close()
		}
	}
}

// rollingRestart is a deploy: each instance of the fleet in turn gets SIGTERM,
// is started again once it has exited, and the next one goes only when the
// balancer sees this one ready again.
func rollingRestart(ctx context.Context, r *rig, _ time.Duration) (func() error, error) {
	if r.fleet == nil || len(r.fleet.members) == 0 {
		return nil, errors.New("a rolling restart needs the fleet (Scenario.Fleet)")
	}
	for _, m := range r.fleet.members {
		if err := m.svc.Restart(); err != nil {
			return nil, fmt.Errorf("rolling restart: %w", err)
		}
		if err := m.lb.waitReady(ctx, m.addr, restartReadyBound); err != nil {
			return nil, fmt.Errorf("rolling restart of %s: %w", m.svc.Name, err)
		}
	}
	return nil, nil
}
