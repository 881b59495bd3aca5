// Command proxy is flashgate's edge: it answers every reserve that will not be
// admitted without touching Postgres (validation, the set of voucher codes, a
// sold-out flag and the atomic Redis script, batched per voucher, which
// decides the order's own state, then pause, window, minimum and stock) and
// forwards only the admitted ones, and retries of known orders, to the
// ledger. A voucher's terms are read from the ledger only when neither the
// cache nor Redis has them (standard vouchers, a cold proxy).
//
// main reads the Config once and wires the packages under internal/, each
// importing only those before it: ledger (the client of the ledger, its
// batched writes, readiness), codes (the set of voucher codes), limits (the
// per-client buckets), admit (the Admitter) and edge (the routes).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/proxy/internal/admit"
	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
)

// Config is everything the proxy reads from its environment, read once in main.
type Config struct {
	Addr            string                        // PROXY_ADDR
	RedisURL        string                        // REDIS_URL
	LedgerURL       string                        // LEDGER_URL
	LedgerWait      time.Duration                 // LEDGER_START_WAIT: how long the start waits for the ledger
	LedgerToken     string                        // LEDGER_TOKEN: sent to the ledger (scope internal suffices)
	Token           string                        // PROXY_TOKEN: named default, every scope
	Tokens          map[string]envconf.Credential // PROXY_TOKENS: name:token[:scope+scope...],...
	OpenEdge        bool                          // PROXY_AUTH=off: no token required (and none set)
	SoldOutTTL      time.Duration                 // SOLDOUT_TTL
	VoucherCacheTTL time.Duration                 // VOUCHER_CACHE_TTL
	RedisTimeout    time.Duration                 // REDIS_TIMEOUT
	LedgerTimeout   time.Duration                 // LEDGER_TIMEOUT
	Coalesce        bool                          // PROXY_COALESCE (on|off)
	MaxBatch        int                           // PROXY_MAX_BATCH
	RedisPool       int                           // REDIS_POOL_SIZE; 0: go-redis's default
	WriteTarget     time.Duration                 // ADMIT_WRITE_TARGET; 0 (the default): no admission window
	RedisWarm       int                           // REDIS_WARM_CONNS: Redis connections opened at start
	LedgerWarm      int                           // LEDGER_WARM_CONNS: ledger connections opened at start and kept warm
	WarmRequests    int                           // WARM_REQUESTS: reserves the proxy sends itself before it listens (warmUp)
	CodesRefresh    time.Duration                 // LIVE_CODES_REFRESH: a code outside the set re-reads it at most this often
	LedgerLookups   int                           // LEDGER_LOOKUPS: lookups at the ledger in flight at once
	CheckoutKeys    checkout.Keys                 // CHECKOUT_TOKEN_SECRET: keyId:secret[,keyId:secret...]
	Limits          limits.Config                 // CLIENT_RATE, CLIENT_BURST, CUSTOMER_RATE, CUSTOMER_BURST, TRUSTED_PROXIES, REFUSE_EARLY_RETRIES
	httpx.Serving                                 // MAX_CONNS, MAX_INFLIGHT, DEBUG_ADDR, SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT
}

// doc heads the proxy's --help.
const doc = `proxy is flashgate's edge: it answers every reserve that will not be admitted
without touching Postgres and forwards the admitted ones to the ledger.`

// configFrom reads the Config from e (the environment, or a map in tests);
// each read's last argument is the setting's line in --help.
func configFrom(e *envconf.Reader) (Config, error) {
	c := Config{
		Addr:     e.Addr("PROXY_ADDR", "127.0.0.1:8080", "listen address"),
		RedisURL: e.String("REDIS_URL", "", "required: redis://[user:pass@]host:port/db, or redis+cluster://host1:port,host2:port for a Redis Cluster"),
		LedgerURL: e.URL("LEDGER_URL", "http://127.0.0.1:8081", []string{"http", "https"},
			"the ledger (one, or a balancer in front of several)"),
		LedgerWait: e.Duration("LEDGER_START_WAIT", 15*time.Second,
			"how long the proxy waits at start for the ledger to answer (a ledger starting beside it); then it stops, naming the cause (exit 2)"),
		LedgerToken: e.String("LEDGER_TOKEN", "", "bearer token sent to the ledger; the scope internal is all it needs"),
		Token: e.String("PROXY_TOKEN", "",
			"bearer token clients send (Authorization: Bearer <token>), with every scope of the edge (reserve, settle, metrics)"),
		Tokens: e.Tokens("PROXY_TOKENS", proxyScopes,
			"more named client tokens, each with its scopes: name:token[:scope+scope...],...; scopes: reserve (reserve, read a reservation), settle (confirm, release, refund), metrics (/metrics on the client port when METRICS_ADDR is unset); a token without a scope list has every one"),
		OpenEdge: !e.Switch("PROXY_AUTH", true,
			"off: the edge takes requests without a token (logged at WARN at start); on: PROXY_TOKEN or PROXY_TOKENS is required, the proxy refuses to start without one"),
		SoldOutTTL: e.Duration("SOLDOUT_TTL", 2*time.Second,
			"how long the local sold-out flag answers 409 without asking Redis"),
		VoucherCacheTTL: e.Duration("VOUCHER_CACHE_TTL", 5*time.Second, "how long a voucher's terms are cached"),
		RedisTimeout: e.Duration("REDIS_TIMEOUT", 250*time.Millisecond,
			"deadline of one Redis call; past it the request gets 503"),
		LedgerTimeout: e.Duration("LEDGER_TIMEOUT", time.Second,
			"deadline of one ledger call (an admitted write's runs from its admission, its wait for a batch included); keep it above the ledger's DB_TIMEOUT and below its HANGING_GRACE"),
		Coalesce: e.Switch("PROXY_COALESCE", true, "off: one script call per request (for comparison)"),
		MaxBatch: e.Int("PROXY_MAX_BATCH", 256, 1, "most requests per script call"),
		RedisPool: e.Int("REDIS_POOL_SIZE", 0, 0,
			"Redis connections per proxy; 0: go-redis's default (10 per CPU)"),
		WriteTarget: e.DurationMin("ADMIT_WRITE_TARGET", 0, 0,
			"0 (default): no admission window, MAX_INFLIGHT and LATENCY_SLO bound the proxy; else the window's least target: admitted flash reserves on their way to the ledger are bounded by a window that shrinks while it is full, the writes' mean is above its target (3 x the fastest write of the last 10-20s, at least this) and they queue (the fastest write of 100ms at twice that floor). Off by default: on a 2-core machine it sold fewer and answered no faster (README, shedding)"),
		RedisWarm: e.Int("REDIS_WARM_CONNS", 4, 0, "Redis connections opened as the service starts, with every gate script loaded"),
		LedgerWarm: e.Int("LEDGER_WARM_CONNS", 4, 0,
			"connections to the ledger opened at start and kept warm"),
		WarmRequests: e.Int("WARM_REQUESTS", 2000, 0,
			"reserves the proxy sends itself before it listens, MAX_INFLIGHT at a time (256 when it is 0) on loopback connections, each refused by validation (nothing reaches Redis or the ledger), so that a sale's first requests find its heap, stacks and pools grown; 0: none"),
		CodesRefresh: e.DurationMin("LIVE_CODES_REFRESH", time.Second, 0,
			"the proxy answers a code outside the set of every voucher's code 404 itself; the set is read at start, a created voucher joins it on the change channel, and a code outside it re-reads the whole set at most this often (the longest a voucher whose creation message was lost answers 404); 0: every such code re-reads it"),
		LedgerLookups: e.Int("LEDGER_LOOKUPS", 8, 1,
			"lookups at the ledger (a voucher's terms, the set of codes) in flight at once; over it a request is answered 503 at once"),
		Serving: httpx.ReadServing(e),
	}
	secret := e.String("CHECKOUT_TOKEN_SECRET", "",
		"keyId:secret[,keyId:secret...] (secrets of 16 bytes or more) verifying the X-Checkout-Token of vouchers with requireCheckoutToken; every listed key verifies, shops sign with the first; unset: those vouchers' reserves are refused 403")
	trusted := e.String("TRUSTED_PROXIES", "",
		"CIDRs (or addresses), comma-separated, of the proxies in front whose X-Forwarded-For is believed: a request from one is keyed by the first address in it, from the right, outside them; empty: every request is keyed by its peer address (or its named token)")
	c.Limits = readLimits(e, c.RedisTimeout)
	if err := e.Err(); err != nil {
		return c, err
	}
	var err error
	if c.CheckoutKeys, err = checkout.ParseKeys(secret); err != nil {
		return c, fmt.Errorf("CHECKOUT_TOKEN_SECRET: %w", err)
	}
	if c.Limits.Trusted, err = limits.ParseTrustedProxies(trusted); err != nil {
		return c, err
	}
	if c.Limits.IPv6Prefix > 128 {
		return c, fmt.Errorf("CLIENT_KEY_IPV6_PREFIX=%d: want 1 to 128", c.Limits.IPv6Prefix)
	}
	if c.RedisURL == "" {
		return c, errors.New("REDIS_URL is required")
	}
	if err := gate.CheckURL(c.RedisURL); err != nil {
		return c, err
	}
	if err := checkEdgeAuth(c); err != nil {
		return c, err
	}
	if c.WriteTarget != 0 && (c.WriteTarget < time.Millisecond || c.WriteTarget >= c.LedgerTimeout) {
		return c, fmt.Errorf("ADMIT_WRITE_TARGET=%s: want 0 (no admission window) or at least 1ms and below LEDGER_TIMEOUT (%s)",
			c.WriteTarget, c.LedgerTimeout)
	}
	if c.RedisPool > 0 && c.RedisWarm > c.RedisPool {
		return c, fmt.Errorf("REDIS_WARM_CONNS (%d) must be at most REDIS_POOL_SIZE (%d)", c.RedisWarm, c.RedisPool)
	}
	return c, c.Shutdown.Check(c.LedgerTimeout, "LEDGER_TIMEOUT")
}

// proxyScopes are the scopes PROXY_TOKENS may give: the edge's routes take
// no other (a read, write or internal token belongs to a ledger).
var proxyScopes = []string{string(auth.ScopeReserve), string(auth.ScopeSettle), string(edge.ScopeMetrics)}

// checkEdgeAuth refuses an edge without a token unless PROXY_AUTH=off says
// so, PROXY_AUTH=off beside a token (which of the two was meant?), and
// PROXY_TOKENS that make an actor ambiguous.
func checkEdgeAuth(c Config) error {
	hasToken := c.Token != "" || len(c.Tokens) > 0
	switch {
	case !hasToken && !c.OpenEdge:
		return errors.New("PROXY_TOKEN or PROXY_TOKENS is required: without a token anyone can read, release, confirm or refund any reservation; PROXY_AUTH=off opens the edge on purpose")
	case hasToken && c.OpenEdge:
		return errors.New("PROXY_AUTH=off and PROXY_TOKEN or PROXY_TOKENS are both set: unset one")
	}
	return auth.CheckTokens("PROXY_TOKEN", c.Token, "PROXY_TOKENS", c.Tokens)
}

// readLimits reads the per-client limits' settings (TRUSTED_PROXIES aside).
func readLimits(e *envconf.Reader, redisTimeout time.Duration) limits.Config {
	l := limits.Config{
		ClientRate: e.Int("CLIENT_RATE", 0, 0,
			"requests a second per client key (its named token, else its address: see TRUSTED_PROXIES and CLIENT_KEY_IPV6_PREFIX), reserves and the order routes (get, confirm, release, refund) alike, retries included, in a token bucket in each proxy, charged once the request is known to be for a voucher and, for a voucher that requires one, to carry a valid checkout token; over it: 429 RATE_LIMITED with Retry-After, before the gate; 0: off"),
		ClientBurst: e.Int("CLIENT_BURST", 0, 0, "the client bucket's size: requests a client key may send at once; 0: CLIENT_RATE"),
		IPv6Prefix: e.Int("CLIENT_KEY_IPV6_PREFIX", 64, 1,
			"an IPv6 client address is keyed by its network of this many bits (64: one host's /64 shares one bucket; 128: every address its own); IPv4 addresses are keyed whole"),
		CustomerRate: e.Int("CUSTOMER_RATE", 0, 0,
			"reserves a second per customerId per voucher, in a bucket in Redis shared by every proxy (one Redis call per reserve), charged only once the reserve is known to be for a voucher and, for a voucher that requires one, to carry the customer's valid checkout token; over it: 429 RATE_LIMITED with Retry-After, before the gate; 0: off"),
		CustomerBurst: e.Int("CUSTOMER_BURST", 0, 0, "the customer bucket's size; 0: CUSTOMER_RATE"),
		EarlyRetries: e.Switch("REFUSE_EARLY_RETRIES", true,
			"on: an order sent again for the same customer before the Retry-After of its last 503 or 429 is answered 429 RATE_LIMITED without being decided, with the time left as its Retry-After; a client key back before that of its last 429 while its bucket is still empty is told a longer Retry-After"),
		RedisTimeout: redisTimeout,
	}
	return l
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	envconf.Main("proxy", doc, configFrom, run)
}

func run(cfg Config, log *slog.Logger) error {
	// The address first: a taken port stops the start before anything is
	// contacted or said to listen.
	p, err := httpx.Start("proxy", "PROXY_ADDR", cfg.Addr, cfg.Serving, log)
	if err != nil {
		return err
	}
	defer p.Close()
	stopping := p.Stopping()
	ctx := p.Context() // batches and forwarded writes outlive the drain
	redis.SetLogger(gate.NewLogger(log))
	metrics := httpx.NewMetrics("proxy")
	rdb, err := gate.NewClient(cfg.RedisURL, gate.ClientOptions{Timeout: cfg.RedisTimeout, PoolSize: cfg.RedisPool})
	if err != nil {
		return err
	}
	defer rdb.Close()
	lc := ledger.NewClient(cfg.LedgerURL, cfg.LedgerToken, cfg.LedgerTimeout)
	lc.ObserveLatency(ledger.NewLatency(metrics.Registry))
	lc.ObserveBreaker(metrics.Registry, log)
	if err := ledger.CheckSettings(stopping, lc, cfg.LedgerTimeout, cfg.LedgerWait, log); err != nil {
		return err
	}
	go warm(stopping, rdb, lc, cfg, log) // beside serving: a slow dependency never delays the start
	go lc.KeepWarm(ctx, cfg.LedgerWarm, ledger.KeepWarmEvery)
	adm, err := admit.New(ctx, gate.New(rdb), lc, admit.Config{
		SoldOutTTL: cfg.SoldOutTTL, VoucherCacheTTL: cfg.VoucherCacheTTL, RedisTimeout: cfg.RedisTimeout,
		LedgerTimeout: cfg.LedgerTimeout, Coalesce: cfg.Coalesce, MaxBatch: cfg.MaxBatch, Registerer: metrics.Registry,
		WriteTarget: cfg.WriteTarget, WindowMax: admit.WindowMax(cfg.StartBound()),
		CodesRefresh: cfg.CodesRefresh, Lookups: cfg.LedgerLookups, CheckoutKeys: cfg.CheckoutKeys,
	}, log)
	if err != nil {
		return err
	}
	defer adm.Close()
	_, stopWatch := adm.WatchChanges(ctx, rdb, log)
	defer stopWatch()
	if err := adm.SharePeers(ctx, rdb, metrics.Registry); err != nil {
		return err
	}
	// Beside the watcher: a voucher created while both come up and missed by
	// both is read again by the first miss for it. A failure is logged; the
	// proxy then asks about every code, as before, and the next miss reads.
	_ = adm.LoadCodes(stopping)
	lim := limits.New(cfg.Limits, rdb, metrics.Registry)
	// Readiness is probed in the background: a /readyz answers from what the
	// last probes saw, and never reaches the ledger itself.
	ready := ledger.NewReadiness(ledger.Ready(lc))
	ready.Check(stopping)
	go ready.Run(ctx, ledger.ReadyEvery)
	srv := &edge.Server{Log: log, Admit: adm, Ledger: lc, Limits: lim, Token: cfg.Token, Tokens: cfg.Tokens, Metrics: metrics,
		MetricsElsewhere: cfg.MetricsAddr != "", MaxInflight: cfg.MaxInflight, InflightCap: cfg.InflightCap(), LatencySLO: cfg.LatencySLO, Ready: func(context.Context) error {
			// Ready while a ledger answers: without Redis, standard vouchers,
			// confirm and release still work (flash reserves get a fast 503).
			if err := p.Err(); err != nil {
				return err
			}
			return ready.Err()
		}}

	if cfg.OpenEdge {
		log.Warn("PROXY_AUTH=off: the edge takes requests without a token; anyone who reaches it can read, release, confirm or refund any reservation")
	}
	p.ServeMetrics(metrics)
	warmUp(stopping, *srv, cfg, log)
	err = p.Serve(srv.Handler(), "ledger", cfg.LedgerURL, "coalesce", cfg.Coalesce)
	log.Info("proxy stopped")
	return err
}
