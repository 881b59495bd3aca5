package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// Clients that leave before their answer (a short client timeout) while the
// admitted writes queue behind a group commit held on the voucher's row lock:
// a claim whose client left was dropped from the forward queue, provably never
// sent, and kept its Redis use until HANGING_GRACE and a reconcile. Now every
// admitted claim is written (or given back) whatever its client does, so Redis
// agrees with the database without the reconciler.
func TestClientsLeavingKeepNoUse(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{coalesce: coalesce})
			code := newCode(t)
			s.createVoucher(t, code, 100, 1, true)
			require.Equal(t, 201, s.reserve(t, code, 1, code+"-first").Status) // loaded, terms cached

			hold, release := httpxtest.VoucherLock(t, devstacktest.PostgresURL(t), code)
			hold()
			impatient := &http.Client{Timeout: 80 * time.Millisecond}
			var wg sync.WaitGroup
			for i := 2; i <= 41; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body, _ := json.Marshal(map[string]any{"customerId": i, "orderId": fmt.Sprintf("%s-%d", code, i), "orderAmount": 5_000})
					resp, err := impatient.Post(s.ProxyURL+"/vouchers/"+code+"/reservations", "application/json", bytes.NewReader(body))
					if err == nil {
						resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			time.Sleep(300 * time.Millisecond) // below DB_TIMEOUT: the held write commits once freed
			release()
			agreementtest.RequireAgreement(t, s.rdb, s.pool, code)
			t.Logf("%d of 41 orders written", s.db(t, code).Used)
		})
	}
}

// A claim the gate admitted whose write never reached the ledger (the ledger
// is down: the connection is refused, then the circuit breaker refuses at
// once) gets its Redis use back from the proxy at once: no row can hold it,
// and it need not wait for the reconciler's HANGING_GRACE.
func TestUndeliveredWriteGivesItsUseBack(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true})
	code := newCode(t)
	s.createVoucher(t, code, 100, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-first").Status) // loaded, terms cached
	require.NoError(t, s.Ledger.Stop())
	for i := 2; i <= 21; i++ {
		r := s.reserve(t, code, int64(i), fmt.Sprintf("%s-%d", code, i))
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)
	}
	assert.EqualValues(t, 99, s.redisRemaining(t, code), "redis remaining with the ledger down")
	agreementtest.RequireAgreement(t, s.rdb, s.pool, code)
	s.noAgreement("the ledger is stopped: agreement is checked above, and there is no /metrics to scrape")
}

// One voucher's malformed Redis data (a counter that is not a number: the
// reserve script's error reply) fails that voucher's reserves with 503, and
// only its: Redis answered, so the proxy's Redis circuit breaker stays closed
// and another flash voucher sells on.
func TestOneVouchersBadStateLeavesTheOthers(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true})
	bad, good := newCode(t), newCode(t)
	s.createVoucher(t, bad, 100, 1, true)
	s.createVoucher(t, good, 100, 1, true)
	require.Equal(t, 201, s.reserve(t, bad, 1, bad+"-first").Status) // loaded, terms cached
	require.Equal(t, 201, s.reserve(t, good, 1, good+"-first").Status)
	require.NoError(t, s.rdb.Set(context.Background(), "voucher:{"+bad+"}:remaining", "lots", redis.KeepTTL).Err())
	for i := 2; i <= 12; i++ {
		r := s.reserve(t, bad, int64(i), fmt.Sprintf("%s-%d", bad, i))
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)
	}
	for i := 2; i <= 6; i++ {
		r := s.reserve(t, good, int64(i), fmt.Sprintf("%s-%d", good, i))
		assert.Equal(t, http.StatusCreated, r.Status, "the other voucher, reserve %d: %s", i, r.Raw)
	}
	agreementtest.RequireAgreement(t, s.rdb, s.pool, good)
	// The counter mended by hand, so that the end-of-test check finds both
	// vouchers agreeing: the bad voucher's reserves changed nothing.
	require.NoError(t, s.rdb.Set(context.Background(), "voucher:{"+bad+"}:remaining", 99, redis.KeepTTL).Err())
}

// An orderId that holds a use on voucher A, sent through the proxy to flash
// voucher B: 409 ORDER_CONFLICT, and B's Redis keeps no use for it (each such
// request lowered B's remaining by one until a reconcile).
func TestOrderOfAnotherVoucherThroughProxy(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true})
	a, b := newCode(t), newCode(t)
	s.createVoucher(t, a, 10, 1, true)
	s.createVoucher(t, b, 10, 1, true)
	order := a + "-o"
	require.Equal(t, 201, s.reserve(t, a, 1, order).Status)
	for _, customer := range []int64{1, 2, 1} {
		r := s.reserve(t, b, customer, order)
		assert.Equal(t, http.StatusConflict, r.Status, r.Raw)
		assert.Equal(t, "ORDER_CONFLICT", r.Code())
	}
	agreementtest.RequireAgreement(t, s.rdb, s.pool, a)
	agreementtest.RequireAgreement(t, s.rdb, s.pool, b)
	assert.EqualValues(t, 10, s.redisRemaining(t, b))
}

// An admitted batch the ledger shed (its MAX_INFLIGHT requests in flight)
// never reached a handler: the ledger's 503 says so (api.HeaderShed), and
// the proxy gives its Redis uses back at once instead of leaving them to the
// reconciler. Here the ledger holds one request at a time, the first lane's
// write waits on the voucher's row lock, and the second lane's is shed.
func TestShedWriteGivesItsUseBack(t *testing.T) {
	t.Parallel()
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t), coalesce: true}
	s := newStackEnv(t, o, "MAX_INFLIGHT=1", "DB_TIMEOUT=1500ms")
	code := newCode(t)
	s.createVoucher(t, code, 100, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-first").Status) // loaded, terms cached
	hold, release := httpxtest.VoucherLock(t, o.dbURL, code)
	hold()
	statuses := make(chan int, 2)
	for i := int64(2); i <= 3; i++ {
		go func() { statuses <- s.reserve(t, code, i, fmt.Sprintf("%s-%d", code, i)).Status }()
		time.Sleep(100 * time.Millisecond) // the first is on its lane, waiting on the lock
	}
	shed := <-statuses
	assert.Equal(t, http.StatusServiceUnavailable, shed, "the second lane's write is shed")
	time.Sleep(200 * time.Millisecond)
	release()
	assert.Equal(t, http.StatusCreated, <-statuses, "the first lane's write commits")
	assert.Equal(t, 2, s.db(t, code).Used)
	agreementtest.RequireAgreement(t, s.rdb, s.pool, code)
}

// loseReplies is a Redis hook that, while armed, runs each call of a script
// over a voucher's five keys (the reserve script's; not the hand-over's park,
// which has six) and then loses its reply (as a timeout or a cut connection
// does after Redis ran the script).
type loseReplies struct{ armed atomic.Int32 }

func (h *loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		name := cmd.Name()
		if (name == "evalsha" || name == "eval") && len(args) > 2 && fmt.Sprint(args[2]) == "5" && h.armed.Add(-1) >= 0 {
			lost := errors.New("i/o timeout: the reply was lost")
			cmd.SetErr(lost)
			return lost
		}
		return err
	}
}

func (h *loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A reserve whose script ran in Redis (its use taken) but whose reply was
// lost: the client gets 503, nobody will write the claim, and the use was held
// until the reconciler freed it. Now the proxy hands such orders to the
// ledger, which gives their uses back once HANGING_GRACE has passed and no row
// holds them; a retry meanwhile is written as usual.
func TestLostReserveReplyIsHandedOver(t *testing.T) {
	t.Parallel()
	lose := &loseReplies{}
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t), coalesce: true, redisHook: lose}
	s := newStackEnv(t, o, "HANGING_GRACE=2s")
	code := newCode(t)
	s.createVoucher(t, code, 100, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-first").Status) // loaded, terms cached
	lose.armed.Store(2)
	gone, retried := code+"-gone", code+"-retried"
	assert.Equal(t, http.StatusServiceUnavailable, s.reserve(t, code, 2, gone).Status)
	assert.Equal(t, http.StatusServiceUnavailable, s.reserve(t, code, 3, retried).Status)
	assert.EqualValues(t, 97, s.redisRemaining(t, code), "the two lost replies' uses are held")
	r := s.reserve(t, code, 3, retried) // the client retries: its held use is written
	assert.Equal(t, http.StatusCreated, r.Status, r.Raw)
	time.Sleep(3 * time.Second) // past HANGING_GRACE and a settler round
	agreementtest.RequireAgreement(t, s.rdb, s.pool, code)
	assert.EqualValues(t, 98, s.redisRemaining(t, code), "the use of the order nobody wrote is back")
}

// A hand-over that cannot reach the ledger (paused here; a ledger killed or
// paused on sale day) is recorded in Redis as parked at once, by the proxy:
// every ledger's reconciler leaves the order to a settler and any ledger's
// settler adopts it. Before, only the ledger recorded it, once the hand-over
// reached it, and the reconciler of another ledger freed such an order first
// (found by the log VOPR, a ledger killed then paused).
func TestHandOverParksInRedisWithoutTheLedger(t *testing.T) {
	t.Parallel()
	lose := &loseReplies{}
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t), coalesce: true, redisHook: lose}
	s := newStackEnv(t, o, "HANGING_GRACE=2s")
	code := newCode(t)
	s.createVoucher(t, code, 100, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-first").Status) // loaded, terms cached
	require.NoError(t, s.Ledger.Pause())
	lose.armed.Store(1)
	gone := code + "-gone"
	assert.Equal(t, http.StatusServiceUnavailable, s.reserve(t, code, 2, gone).Status)
	require.Eventually(t, func() bool {
		parked, err := s.gate.Parked(context.Background(), code)
		return err == nil && !parked[gone].IsZero()
	}, 10*time.Second, 10*time.Millisecond, "the lost reply's order parked in redis")
	require.NoError(t, s.Ledger.Resume()) // it settles the order: Redis agrees with Postgres at the end
}
