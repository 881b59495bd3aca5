package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// termsReads counts the reads of a voucher's terms (store.TermsSQL) that reach
// Postgres and, while hold is set, holds the first read after it was set
// until hold is closed.
type termsReads struct {
	n    atomic.Int64
	hold atomic.Pointer[chan struct{}]
}

func (r *termsReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL != store.TermsSQL {
		return ctx
	}
	r.n.Add(1)
	if h := r.hold.Swap(nil); h != nil {
		<-*h
	}
	return ctx
}

func (*termsReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// holdNext holds the next read until the returned func is called.
func (r *termsReads) holdNext() (release func()) {
	h := make(chan struct{})
	r.hold.Store(&h)
	var once sync.Once
	return func() { once.Do(func() { close(h) }) }
}

// heldRead starts a read of code's terms on st that is held in Postgres' stead
// until release; first has its caller's error once it returns.
func (r *termsReads) heldRead(t *testing.T, st *store.Store, code string) (first <-chan error, release func()) {
	r.n.Store(0)
	release = r.holdNext()
	done := make(chan error, 1)
	go func() {
		_, err := st.Terms(context.Background(), code)
		done <- err
	}()
	require.Eventually(t, func() bool { return r.n.Load() == 1 }, 10*time.Second, time.Millisecond)
	return done, release
}

// TestTermsMissesShareOneRead checks that the concurrent misses of one
// voucher's terms send Postgres one read, not one each (a burst's writes when
// the cache runs out, or every write while Postgres restarts: one connection
// attempt instead of one per write); that a call after ForgetTerms does not
// share a read that began before it; and that a caller whose deadline passes
// stops waiting for the shared read.
func TestTermsMissesShareOneRead(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	reads := &termsReads{}
	pool := l.PoolOfItsOwn(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = reads })

	t.Run("misses together", func(t *testing.T) {
		st := store.New(pool, time.Minute)
		reads.n.Store(0)
		release := reads.holdNext()
		defer release()
		const callers = 64
		var started, done sync.WaitGroup
		got := make([]int64, callers)
		errs := make([]error, callers)
		for i := range callers {
			started.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				started.Done()
				v, err := st.Terms(ctx, code)
				got[i], errs[i] = v.DiscountAmount, err
			}()
		}
		started.Wait()
		// Every caller is on its way; those not yet in Terms when the read
		// ends find its answer cached. Either way, one read.
		require.Eventually(t, func() bool { return reads.n.Load() >= 1 }, 10*time.Second, time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		release()
		done.Wait()
		for i := range callers {
			require.NoError(t, errs[i])
			assert.Equal(t, int64(100_000), got[i])
		}
		assert.Equal(t, int64(1), reads.n.Load(), "%d concurrent misses of one code: Postgres reads", callers)
	})

	t.Run("a change between", func(t *testing.T) {
		st := store.New(pool, time.Minute)
		first, release := reads.heldRead(t, st, code)
		defer release()
		// A change commits and is announced while that read is held.
		l.Exec(t, `UPDATE voucher SET discount_amount = 9 WHERE code = $1`, code)
		st.ForgetTerms(code)
		v, err := st.Terms(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, int64(9), v.DiscountAmount, "a call after ForgetTerms reads again")
		assert.Equal(t, int64(2), reads.n.Load(), "it did not wait for the read that began before the change")
		release()
		require.NoError(t, <-first)
		v, err = st.Terms(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, int64(9), v.DiscountAmount, "the read after the change is the one cached")
		assert.Equal(t, int64(2), reads.n.Load(), "and it is cached")
	})

	t.Run("a caller's deadline", func(t *testing.T) {
		st := store.New(pool, time.Minute)
		first, release := reads.heldRead(t, st, code)
		defer release()
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := st.Terms(short, code)
		require.ErrorIs(t, err, context.DeadlineExceeded, "a caller stops waiting at its own deadline")
		release()
		require.NoError(t, <-first, "the shared read goes on for the others")
		assert.Equal(t, int64(1), reads.n.Load())
	})
}
