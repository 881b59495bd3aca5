package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// LimitConfig is the per-client limits' settings.
type LimitConfig struct {
	ClientRate    int            // CLIENT_RATE: reserves a second per client key; 0: off
	ClientBurst   int            // CLIENT_BURST; 0: ClientRate
	CustomerRate  int            // CUSTOMER_RATE: reserves a second per customerId per voucher; 0: off
	CustomerBurst int            // CUSTOMER_BURST; 0: CustomerRate
	Trusted       []netip.Prefix // TRUSTED_PROXIES
	EarlyRetries  bool           // RETRY_EARLY_REFUSED: a retry before its Retry-After is refused again
	RedisTimeout  time.Duration  // deadline of the customer limit's Redis call
}

// Bounds of the limits' memory.
const (
	maxClientBuckets = 100_000 // client keys with a bucket (buckets)
	maxComebacks     = 200_000 // orders and client keys told to stay away (comebacks)
)

// Why a reserve was refused RATE_LIMITED, as flashgate_rate_limited_total's
// cause label says.
const (
	causeClient      = "client"       // its client key over CLIENT_RATE
	causeCustomer    = "customer"     // its customerId over CUSTOMER_RATE on this voucher
	causeEarlyOrder  = "early_order"  // its order sent again before its Retry-After
	causeEarlyClient = "early_client" // its client key back before the Retry-After of its last 429
)

// limits are the edge's defences against its crowd, decided before the gate:
// a token bucket per client key (in this process: every request pays for it,
// the flood included, so it must cost no Redis call), one per customerId per
// voucher (in Redis, GCRA of go-redis/redis_rate: a customerId is the same
// behind every address and every proxy, so only a fleet-wide count holds it),
// and the memory of who was told to come back later (comebacks).
type limits struct {
	keys      clientKeys
	clients   *buckets         // nil: CLIENT_RATE off
	customers *customerLimiter // nil: CUSTOMER_RATE off
	comebacks *comebacks       // nil: early retries are not refused
	refused   *httpx.Resolved[string, prometheus.Counter]
	now       func() time.Time
}

// newLimits builds the limits; rdb carries the customer buckets.
func newLimits(cfg LimitConfig, rdb redis.UniversalClient, reg prometheus.Registerer) *limits {
	l := &limits{keys: clientKeys{trusted: cfg.Trusted}, now: time.Now}
	if cfg.ClientRate > 0 {
		l.clients = newBuckets(cfg.ClientRate, burstOr(cfg.ClientBurst, cfg.ClientRate), maxClientBuckets)
	}
	if cfg.CustomerRate > 0 {
		l.customers = &customerLimiter{rl: redis_rate.NewLimiter(rdb), timeout: cfg.RedisTimeout,
			limit: redis_rate.Limit{Rate: cfg.CustomerRate, Burst: burstOr(cfg.CustomerBurst, cfg.CustomerRate), Period: time.Second}}
	}
	if cfg.EarlyRetries {
		l.comebacks = newComebacks(maxComebacks)
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_rate_limited_total",
		Help: "Reserves answered 429 RATE_LIMITED before the gate, by cause: client (its client key over CLIENT_RATE), customer (its customerId over CUSTOMER_RATE on the voucher), early_order (its order sent again before its Retry-After), early_client (its client key back before the Retry-After of its last 429).",
	}, []string{"cause"})
	if reg != nil {
		reg.MustRegister(vec)
	}
	l.refused = httpx.NewResolved(func(cause string) prometheus.Counter { return vec.WithLabelValues(cause) })
	for _, cause := range []string{causeClient, causeCustomer, causeEarlyOrder, causeEarlyClient} {
		l.refused.Get(cause) // every cause scraped from the start, at 0: a rate is drawn from the first refusal
	}
	return l
}

func burstOr(burst, rate int) int {
	if burst > 0 {
		return burst
	}
	return rate
}

// guard is the reserve route's gate before the gate (httpx.Service.Guard):
// an order this proxy answered 201 passes untouched (its retry takes nothing
// new and is answered 201 from its row); an order or client key back before
// its Retry-After is refused again (refuseEarly); a client key over
// CLIENT_RATE is refused. Every 503 or 429 the reserve gets, here or further
// on (the shedder, the window, a fault), is remembered with its Retry-After.
//
// Its lookups run only when something may refuse: with CLIENT_RATE off and
// no order told to come back later (a sale going well), a reserve costs it
// the reading of its claim, which the handler then uses (PeekClaim: the body
// is read once), and nothing else until an answer is a 503 or a 429.
func (l *limits) guard(admittedHere func(code string, cl voucher.Claim) bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Method != http.MethodPost || c.FullPath() != api.RouteReservations {
			return
		}
		var code string
		var cl voucher.Claim
		claimed := false // the body is a valid claim
		if cd, err := httpx.CodeParam(c); err == nil {
			code = cd
			cl, claimed = httpx.PeekClaim(c)
		}
		passes := func() bool { return claimed && admittedHere(code, cl) } // an order this proxy answered 201
		comeback := func() string {                                        // the order's key in comebacks
			if !claimed {
				return ""
			}
			return "order:" + admittedKey(code, cl.OrderID)
		}
		if l.clients != nil || l.comebacks.holding() {
			if passes() {
				return
			}
			order := comeback()
			var key, client string // only CLIENT_RATE's refusals tell a client key to come back
			if l.clients != nil {
				key = l.keys.key(c)
				client = "client:" + key
			}
			if l.refuseEarly(c, client, order) {
				return
			}
			if l.clients != nil {
				if ok, wait := l.clients.take(key, l.now()); !ok {
					l.refuse(c, causeClient, wait, "too many reserves from this client; retry after Retry-After", client, order)
					return
				}
			}
		}
		c.Next()
		if st := c.Writer.Status(); l.comebacks != nil && claimed &&
			(st == http.StatusServiceUnavailable || st == http.StatusTooManyRequests) && !passes() {
			if d, ok := httpx.RetryAfterOf(c.Writer.Header()); ok {
				now := l.now()
				l.comebacks.set(comeback(), now.Add(d), now)
			}
		}
	}
}

// refuseEarly refuses a reserve whose client key (when not "") or order
// (when not "") is back before its Retry-After, and puts its time off once by
// a new Retry-After (comebacks): a retry loop is decided less often than a
// client that waits.
func (l *limits) refuseEarly(c *gin.Context, client, order string) bool {
	if l.comebacks == nil {
		return false
	}
	now := l.now()
	penalty := time.Duration(httpx.RetryAfterSeconds(0)) * time.Second
	var until time.Time
	var early bool
	cause := causeEarlyClient
	if client != "" {
		until, early = l.comebacks.early(client, now, penalty)
	}
	if !early && order != "" {
		cause = causeEarlyOrder
		until, early = l.comebacks.early(order, now, penalty)
	}
	if !early {
		return false
	}
	l.refuse(c, cause, until.Sub(now), "sent again before its Retry-After; wait as long as Retry-After says")
	return true
}

// refuse answers 429 RATE_LIMITED with a Retry-After of at least wait, counts
// it by cause, and remembers the keys given (the client key, the order) to
// stay away as long.
func (l *limits) refuse(c *gin.Context, cause string, wait time.Duration, message string, keys ...string) {
	l.refused.Get(cause).Inc()
	d := httpx.SetRetryAfter(c, wait)
	c.AbortWithStatusJSON(http.StatusTooManyRequests, api.ErrorBody{Error: voucher.CodeRateLimited, Message: message})
	if l.comebacks == nil {
		return
	}
	now := l.now()
	for _, k := range keys {
		if k != "" {
			l.comebacks.set(k, now.Add(d), now)
		}
	}
}

// customer applies CUSTOMER_RATE to cl's customer on voucher code, and
// reports whether the reserve may go on (false: it was answered 429). An
// order this proxy answered 201 (admittedHere, asked only with CUSTOMER_RATE
// on) takes no token: its retry takes nothing new. A Redis that fails to
// answer lets the reserve through: the gate decides it, and answers the
// fault, as it would have. Nil limits let everything through.
func (l *limits) customer(c *gin.Context, code string, cl voucher.Claim, admittedHere func(code string, cl voucher.Claim) bool) bool {
	if l == nil || l.customers == nil || admittedHere(code, cl) {
		return true
	}
	ok, wait, err := l.customers.take(c, code, cl.CustomerID)
	if err != nil || ok {
		return true
	}
	l.refuse(c, causeCustomer, wait, "too many reserves for this customer on this voucher; retry after Retry-After")
	return false
}

// customerLimiter is a GCRA bucket per customerId per voucher in Redis
// (go-redis/redis_rate): one key per pair, in the voucher's hash slot.
type customerLimiter struct {
	rl      *redis_rate.Limiter
	limit   redis_rate.Limit
	timeout time.Duration
}

// take takes a token from the customer's bucket on code; when there is
// none, it returns false and how long until the next one.
func (cl *customerLimiter) take(ctx context.Context, code string, customer int64) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cl.timeout)
	defer cancel()
	res, err := cl.rl.Allow(ctx, customerBucketKey(code, customer), cl.limit)
	if err != nil {
		return false, 0, fmt.Errorf("customer rate of %s in redis: %w", code, err)
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, res.RetryAfter, nil
}

// customerBucketKey is the key of a customer's bucket on a voucher (redis_rate
// puts "rate:" before it); the voucher's code is its hash tag.
func customerBucketKey(code string, customer int64) string {
	return "flashgate:{" + code + "}:customer:" + strconv.FormatInt(customer, 10)
}
