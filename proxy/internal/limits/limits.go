// Package limits is the edge's defences against its crowd, decided before
// the gate: a token bucket per client key (CLIENT_RATE), one per customerId
// per voucher in Redis (CUSTOMER_RATE), and the memory of who was told to
// come back later (REFUSE_EARLY_RETRIES). The edge's guard charges them,
// before the gate.
package limits

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

// Config is the per-client limits' settings.
type Config struct {
	ClientRate    int            // CLIENT_RATE: reserves a second per client key; 0: off
	ClientBurst   int            // CLIENT_BURST; 0: ClientRate
	CustomerRate  int            // CUSTOMER_RATE: reserves a second per customerId per voucher; 0: off
	CustomerBurst int            // CUSTOMER_BURST; 0: CustomerRate
	Trusted       []netip.Prefix // TRUSTED_PROXIES
	IPv6Prefix    int            // CLIENT_KEY_IPV6_PREFIX: the bits of an IPv6 client key; 0: 128
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

// Limits are the edge's defences against its crowd, decided before the gate:
// a token bucket per client key (in this process: every request pays for it,
// the flood included, so it must cost no Redis call), one per customerId per
// voucher (in Redis, GCRA of go-redis/redis_rate: a customerId is the same
// behind every address and every proxy, so only a fleet-wide count holds it),
// and the memory of who was told to come back later (comebacks).
type Limits struct {
	keys      clientKeys
	clients   *buckets         // nil: CLIENT_RATE off
	customers *customerLimiter // nil: CUSTOMER_RATE off
	comebacks *comebacks       // nil: early retries are not refused
	refused   *httpx.Resolved[string, prometheus.Counter]
	now       func() time.Time
}

// New builds the limits; rdb carries the customer buckets, reg (nil:
// nowhere) flashgate_rate_limited_total.
func New(cfg Config, rdb redis.UniversalClient, reg prometheus.Registerer) *Limits {
	l := &Limits{keys: clientKeys{trusted: cfg.Trusted, v6Bits: cfg.IPv6Prefix}, now: time.Now}
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

// Order is a reserve's order and customer, as ChargeReserve charged it.
// Its key is made only when a refusal is remembered or looked up: most
// reserves of a sale going well need neither, and it was an allocation each.
type Order struct {
	code string
	cl   voucher.Claim
}

// key is the order's key in comebacks.
func (o Order) key() string {
	return "order:" + o.code + "/" + o.cl.OrderID + "/" + strconv.FormatInt(o.cl.CustomerID, 10)
}

// ChargeReserve charges a vetted reserve (see edge's guard): its client
// key's bucket (CLIENT_RATE: the sender's own budget, a retry of an order
// answered 201 included), its order's early retry, its customer's bucket
// (CUSTOMER_RATE, in Redis). It reports whether the reserve may go on (false:
// it was answered 429), and its order and customer for RememberRefusal.
func (l *Limits) ChargeReserve(c *gin.Context, code string, cl voucher.Claim) (order Order, ok bool) {
	order = Order{code: code, cl: cl}
	if !l.ChargeClient(c) || l.refuseEarly(c, order) || !l.customer(c, code, cl, order) {
		return order, false
	}
	return order, true
}

// RememberRefusal remembers, for order (ChargeReserve), the Retry-After of
// the 503 or 429 its reserve was answered further on (the shedder, the
// window, a fault), so that its retry before then is refused again.
func (l *Limits) RememberRefusal(c *gin.Context, order Order) {
	if st := c.Writer.Status(); l.comebacks != nil &&
		(st == http.StatusServiceUnavailable || st == http.StatusTooManyRequests) {
		if d, ok := httpx.RetryAfterOf(c.Writer.Header()); ok {
			now := l.now()
			l.comebacks.set(order.key(), now.Add(d), now)
		}
	}
}

// ChargeClient takes a token from the client key's bucket (CLIENT_RATE) and
// reports whether the request may go on (false: it was answered 429). Only a
// client key whose bucket is empty is refused: one that comes back before the
// Retry-After of its last 429 with the bucket still empty is told a longer
// one (cause early_client), but a shared key (a NAT, a shop's token) is served
// as soon as its bucket has a token, whoever emptied it.
func (l *Limits) ChargeClient(c *gin.Context) bool {
	if l.clients == nil {
		return true
	}
	key := l.keys.key(c)
	now := l.now()
	ok, wait := l.clients.take(key, now)
	if ok {
		return true
	}
	client := "client:" + key
	if l.comebacks != nil {
		penalty := time.Duration(httpx.RetryAfterSeconds(0)) * time.Second
		if until, early := l.comebacks.early(client, now, penalty); early {
			l.refuse(c, causeEarlyClient, until.Sub(now), "sent again before its Retry-After; wait as long as Retry-After says")
			return false
		}
	}
	l.refuse(c, causeClient, wait, "too many requests from this client; retry after Retry-After", client)
	return false
}

// refuseEarly refuses a reserve whose order (for its customer) is back
// before its Retry-After, and puts its time off once by a new Retry-After
// (comebacks): a retry loop is decided less often than a client that waits.
func (l *Limits) refuseEarly(c *gin.Context, order Order) bool {
	if !l.comebacks.holding() { // a sale going well: no lock taken
		return false
	}
	now := l.now()
	penalty := time.Duration(httpx.RetryAfterSeconds(0)) * time.Second
	until, early := l.comebacks.early(order.key(), now, penalty)
	if !early {
		return false
	}
	l.refuse(c, causeEarlyOrder, until.Sub(now), "sent again before its Retry-After; wait as long as Retry-After says")
	return true
}

// refuse answers 429 RATE_LIMITED with a Retry-After of at least wait, counts
// it by cause, and remembers the keys given (the client key, the order) to
// stay away as long.
func (l *Limits) refuse(c *gin.Context, cause string, wait time.Duration, message string, keys ...string) {
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
// reports whether the reserve may go on (false: it was answered 429 and its
// order told to come back later). Asked only of a vetted reserve: a request
// in a customer's name without its checkout token, or for a made-up code,
// never spends the customer's bucket nor makes its key. A retry of an order
// answered 201 takes a token too: it is a request like any other. A Redis
// that fails to answer lets the reserve through: the gate decides it, and
// answers the fault, as it would have. Nil limits let everything through.
func (l *Limits) customer(c *gin.Context, code string, cl voucher.Claim, order Order) bool {
	if l == nil || l.customers == nil {
		return true
	}
	ok, wait, err := l.customers.take(c, code, cl.CustomerID)
	if err != nil || ok {
		return true
	}
	l.refuse(c, causeCustomer, wait, "too many reserves for this customer on this voucher; retry after Retry-After", order.key())
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
