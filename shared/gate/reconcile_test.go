package gate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReconcile(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()

	t.Run("repairs both directions", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(10, 3)
		loadVoucher(t, g, code, v,
			Order{OrderID: "hanging", CustomerID: 1, AdmittedAt: old}, // admitted, never written to the DB
			Order{OrderID: "written", CustomerID: 2, AdmittedAt: old}, // in the DB
		)
		got, _, err := g.Reserve(ctx, code, []Item{{3, "young", testAmount}}) // DB write may be in flight
		require.NoError(t, err)
		require.Equal(t, []Result{Reserved}, got)
		require.NoError(t, rdb.Set(ctx, Keys(code)[0], 42, redis.KeepTTL).Err()) // a drifted counter

		db := []Order{{OrderID: "written", CustomerID: 2}, {OrderID: "lost", CustomerID: 4}}
		res, err := g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 42, RemainingAfter: 7, Released: []string{"hanging"}, Restored: 1, Restoring: []string{"lost"}}, res)

		owners, remaining := orderOwners(t, g, code)
		assert.Equal(t, map[string]int64{"written": 2, "young": 3, "lost": 4}, owners)
		assert.EqualValues(t, 7, remaining)
		assert.Equal(t, map[int64]int{2: 1, 3: 1, 4: 1}, users(t, rdb, code))
		for _, k := range Keys(code)[:4] { // done is empty: not created
			at, err := rdb.PExpireTime(ctx, k).Result()
			require.NoError(t, err)
			assert.Positive(t, at, "%s keeps a TTL", k)
		}

		// Nothing left to do the second time.
		res, err = g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 7, RemainingAfter: 7, Released: []string{}}, res)

		// With no grace the young order is hanging too, once a millisecond of
		// Redis's clock has passed since its admission (age > grace).
		time.Sleep(2 * time.Millisecond)
		res, err = g.Reconcile(ctx, code, v, db, 0)
		require.NoError(t, err)
		assert.Equal(t, []string{"young"}, res.Released)
		assert.EqualValues(t, 8, res.RemainingAfter)
	})

	t.Run("never below zero", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(2, 1)
		loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1}, Order{OrderID: "b", CustomerID: 2})
		db := []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}, {OrderID: "c", CustomerID: 3}}
		res, err := g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.EqualValues(t, 0, res.RemainingAfter)
		assert.Equal(t, 1, res.Restored)
		got, _, err := g.Reserve(ctx, code, []Item{{9, "z", testAmount}})
		require.NoError(t, err)
		assert.Equal(t, []Result{OutOfStock}, got)
	})

	t.Run("database decides the customer", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(5, 1)
		loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1, AdmittedAt: old})
		res, err := g.Reconcile(ctx, code, v, []Order{{OrderID: "a", CustomerID: 2}}, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, res.Released)
		st, _, err := g.State(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, []Order{{OrderID: "a", CustomerID: 2, AdmittedAt: old}}, st.Orders)
		assert.Equal(t, map[int64]int{2: 1}, users(t, rdb, code))
	})

	t.Run("not loaded changes nothing", func(t *testing.T) {
		code := testCode(t, g, "v")
		res, err := g.Reconcile(ctx, code, testMeta(3, 1), []Order{{OrderID: "a", CustomerID: 1}}, time.Minute)
		require.NoError(t, err)
		assert.False(t, res.Loaded)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("refuses conflicting input", func(t *testing.T) {
		code := testCode(t, g, "v")
		_, err := g.Reconcile(ctx, code, testMeta(3, 1), nil, -time.Second)
		assert.Error(t, err)
		_, err = g.Reconcile(ctx, code, testMeta(3, 1), []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 2}}, time.Minute)
		assert.Error(t, err)
	})
}

// TestReconcileStepsUnderReserves: a reconcile in many small steps, while
// reserves run between them, repairs every order the database disagrees on and
// ends exact: remaining is total minus the uses Redis holds (the database's
// and the admissions made meanwhile), users counts them, and remaining never
// rose above what the database allows while it ran.
func TestReconcileStepsUnderReserves(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	const total = 100_000 // the reserves never run out of stock
	v := testMeta(total, 2)
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()

	// Redis holds 1,000 orders the database holds too (10 of them for another
	// customer than the database's) and 300 hanging admissions; it lacks 200
	// database orders, 20 of which it records as finished.
	var redisOrders, db, finished []Order
	want := map[string]int64{}
	var hanging []string
	for i := range 1_000 {
		o := Order{OrderID: fmt.Sprintf("held-%d", i), CustomerID: int64(i + 1), AdmittedAt: old}
		redisOrders = append(redisOrders, o)
		if i%100 == 0 {
			o.CustomerID += 50_000
		}
		db = append(db, Order{OrderID: o.OrderID, CustomerID: o.CustomerID})
		want[o.OrderID] = o.CustomerID
	}
	for i := range 300 {
		o := Order{OrderID: fmt.Sprintf("hang-%d", i), CustomerID: int64(i%150 + 2_001), AdmittedAt: old}
		redisOrders = append(redisOrders, o)
		hanging = append(hanging, o.OrderID)
	}
	for i := range 200 {
		o := Order{OrderID: fmt.Sprintf("lost-%d", i), CustomerID: int64(i + 3_001)}
		db = append(db, o)
		want[o.OrderID] = o.CustomerID
		if i < 20 {
			finished = append(finished, o)
		}
	}
	ok, err := g.Load(ctx, code, Snapshot{Voucher: v, Remaining: int64(total - len(redisOrders)), Orders: redisOrders, Finished: finished})
	require.NoError(t, err)
	require.True(t, ok)
	slices.Sort(hanging)

	// Reserves by new customers while the reconcile runs; a watcher checks that
	// remaining never exceeds total minus the database's orders minus the
	// admissions made so far.
	var reserved sync.Map // orderId -> customer
	var admitted atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	var over atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond): // the scan keeps ahead of them
				}
				customer := int64(100_000 + w*100_000 + i)
				items := []Item{{customer, fmt.Sprintf("new-%d-%d-a", w, i), testAmount}, {customer, fmt.Sprintf("new-%d-%d-b", w, i), testAmount}}
				got, _, err := g.Reserve(ctx, code, items)
				if !assert.NoError(t, err) {
					return
				}
				for k, r := range got {
					if assert.Equal(t, Reserved, r, "Reserve(%v)", items[k]) {
						reserved.Store(items[k].OrderID, customer)
						admitted.Add(1)
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			n := admitted.Load()
			r, err := rdb.Get(ctx, Keys(code)[0]).Int64()
			if !assert.NoError(t, err) {
				return
			}
			if r > total-int64(len(db))-n {
				over.Add(1)
			}
		}
	}()
	res, err := g.reconcile(ctx, code, v, db, 0, time.Minute, stepSizes{page: 20, step: 5})
	during := admitted.Load()
	close(done)
	wg.Wait()
	require.NoError(t, err)
	assert.Zero(t, over.Load(), "times remaining exceeded what the database allows")
	assert.Equal(t, hanging, res.Released)
	assert.Equal(t, 200, res.Restored)
	assert.False(t, res.CounterRepaired, "remaining agreed with the orders at the start")
	assert.Positive(t, during, "no reserve ran during the reconcile")
	t.Logf("%d admitted during the reconcile, %d in all", during, admitted.Load())

	counts := map[int64]int{}
	reserved.Range(func(k, c any) bool {
		want[k.(string)] = c.(int64)
		return true
	})
	for _, c := range want {
		counts[c]++
	}
	owners, remaining := orderOwners(t, g, code)
	assert.Equal(t, want, owners)
	assert.EqualValues(t, total-len(want), remaining)
	// Reserves may have run after the last step.
	assert.GreaterOrEqual(t, res.RemainingAfter, remaining)
	assert.Equal(t, counts, users(t, rdb, code))
	st, _, err := g.State(ctx, code)
	require.NoError(t, err)
	assert.Empty(t, st.Finished, "database orders left in done")

	// Nothing left to do the second time.
	res, err = g.reconcile(ctx, code, v, db, 0, time.Minute, stepSizes{page: 20, step: 5})
	require.NoError(t, err)
	assert.Equal(t, ReconcileDetail{ReconcileResult: ReconcileResult{Loaded: true, RemainingBefore: remaining, RemainingAfter: remaining, Released: []string{}}}, res)
}

// TestReconcileStepsUnderReleases: orders of the database's list released
// (the database first, then Redis) while a reconcile runs in steps never
// leave remaining above what that list allows, and the next pass, given the
// database's list without them, finds no drifted counter.
func TestReconcileStepsUnderReleases(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	const total = 2_000
	v := testMeta(total, 1)
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()
	var held, db []Order
	for i := range 600 {
		o := Order{OrderID: fmt.Sprintf("o-%d", i), CustomerID: int64(i + 1)}
		db = append(db, o)
		if i%10 != 0 { // Redis lost every tenth
			held = append(held, Order{OrderID: o.OrderID, CustomerID: o.CustomerID, AdmittedAt: old})
		}
	}
	loadVoucher(t, g, code, v, held...)

	var wg sync.WaitGroup
	released := map[string]bool{}
	for w := range 4 {
		var mine []string
		for i := w; i < 200; i += 4 {
			mine = append(mine, db[3*i+1].OrderID)
		}
		for _, id := range mine {
			released[id] = true
		}
		wg.Go(func() {
			for _, id := range mine {
				_, err := g.Release(ctx, code, id)
				assert.NoError(t, err)
			}
		})
	}
	res, err := g.reconcile(ctx, code, v, db, 0, time.Minute, stepSizes{page: 10, step: 5})
	wg.Wait()
	require.NoError(t, err)
	assert.LessOrEqual(t, res.RemainingAfter, int64(total-len(db)), "remaining above the database's list")
	assert.Empty(t, res.Released)
	assert.False(t, res.CounterRepaired)

	var db2 []Order
	for _, o := range db {
		if !released[o.OrderID] {
			db2 = append(db2, o)
		}
	}
	res, err = g.reconcile(ctx, code, v, db2, 0, time.Minute, stepSizes{page: 10, step: 5})
	require.NoError(t, err)
	assert.False(t, res.CounterRepaired, "the uses held back were taken for a drifted counter")
	assert.Zero(t, res.Restored)
	owners, remaining := orderOwners(t, g, code)
	for _, o := range db2 {
		assert.Contains(t, owners, o.OrderID)
	}
	for id := range owners {
		// A released order restored before its release reached Redis comes
		// back as a fresh admission, freed after the grace.
		assert.True(t, released[id] || slices.ContainsFunc(db2, func(o Order) bool { return o.OrderID == id }), "order %s", id)
	}
	assert.EqualValues(t, total-len(owners), remaining)
}

// TestReconcileCounterRepaired: ReconcileDetailed tells a counter that
// disagreed with the orders Redis held from one the pass moved by the orders
// it released and restored.
func TestReconcileCounterRepaired(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()
	tests := []struct {
		name    string
		loaded  int // the total limit Redis is loaded with, 0: 10
		total   int // the database's
		held    []Order
		db      []Order
		counter int64 // remaining set by hand, -1: as loaded
		want    bool
	}{
		{name: "agrees", total: 10, held: []Order{{OrderID: "a", CustomerID: 1, AdmittedAt: old}},
			db: []Order{{OrderID: "a", CustomerID: 1}}, counter: -1},
		{name: "released and restored", total: 10, held: []Order{{OrderID: "hang", CustomerID: 1, AdmittedAt: old}},
			db: []Order{{OrderID: "lost", CustomerID: 2}, {OrderID: "lost2", CustomerID: 3}}, counter: -1},
		{name: "restored at zero", loaded: 1, total: 1, held: []Order{{OrderID: "a", CustomerID: 1, AdmittedAt: old}},
			db: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}}, counter: -1},
		{name: "set to zero", total: 10, held: []Order{{OrderID: "a", CustomerID: 1, AdmittedAt: old}},
			db: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}}, counter: 0, want: true},
		{name: "set too high", total: 10, counter: 42, want: true},
		{name: "set too low", total: 10, held: []Order{{OrderID: "hang", CustomerID: 1, AdmittedAt: old}}, counter: 3, want: true},
		{name: "total limit changed without its update", total: 12, counter: -1, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := testCode(t, g, "v")
			loaded := tt.loaded
			if loaded == 0 {
				loaded = 10
			}
			loadVoucher(t, g, code, testMeta(loaded, 3), tt.held...)
			if tt.counter >= 0 {
				require.NoError(t, rdb.Set(ctx, Keys(code)[0], tt.counter, redis.KeepTTL).Err())
			}
			v := testMeta(tt.total, 3)
			res, err := g.reconcile(ctx, code, v, tt.db, 0, time.Minute, stepSizes{page: 1, step: 1})
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.CounterRepaired, "ReconcileDetailed(%s).CounterRepaired", tt.name)
			assert.EqualValues(t, max(0, tt.total-len(tt.db)), res.RemainingAfter)
			res, err = g.ReconcileDetailed(ctx, code, v, tt.db, 0, time.Minute)
			require.NoError(t, err)
			assert.False(t, res.CounterRepaired, "the second time")
		})
	}
}

// BenchmarkReconcile: one reconcile pass of a voucher holding 1,000, 50,000
// and 100,000 orders, all in the database (held: nothing to repair), and of one
// whose 100,000 orders Redis lost (lost: every one restored). Each script call
// blocks Redis while it runs, so besides the pass (pass-ms, the caller's wall
// clock, ns/op without the set-up) it reports the longest single script call
// as Redis measured it (max-script-us, from SLOWLOG; 0: none took 100 us),
// the calls' mean as Redis measured it (mean-script-us, INFO commandstats),
// and their 50th and 99th percentiles as the caller timed them
// (p50-call-us, p99-call-us: with the round trip, but less swayed than the
// longest by another process taking Redis's core for a while).
func BenchmarkReconcile(b *testing.B) {
	for _, n := range []int{1_000, 50_000, 100_000} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) { benchReconcile(b, n, false) })
	}
	b.Run("lost=100000", func(b *testing.B) { benchReconcile(b, 100_000, true) })
}

func benchReconcile(b *testing.B, n int, lost bool) {
	rdb := newClient(b)
	timed := &timedScripter{Scripter: rdb}
	g := New(timed)
	ctx := context.Background()
	code := testCode(b, g, "big")
	v := testMeta(2*n, 1)
	orders := make([]Order, n)
	for i := range orders {
		orders[i] = Order{OrderID: fmt.Sprintf("o-%d", i), CustomerID: int64(i + 1), AdmittedAt: time.Now().UTC()}
	}
	if !lost {
		loadVoucher(b, g, code, v, orders...)
	}
	logSlow(b, rdb)
	var pass, longest time.Duration
	passes, calls, spent := 0, 0, 0.0
	for b.Loop() {
		b.StopTimer()
		if lost {
			require.NoError(b, g.Unload(ctx, code))
			loadVoucher(b, g, code, v)
		}
		require.NoError(b, rdb.SlowLogReset(ctx).Err())
		require.NoError(b, rdb.ConfigResetStat(ctx).Err())
		b.StartTimer()
		timed.record = true
		start := time.Now()
		res, err := g.Reconcile(ctx, code, v, orders, time.Minute)
		pass += time.Since(start)
		timed.record = false
		passes++
		b.StopTimer()
		want := 0
		if lost {
			want = n
		}
		if err != nil || res.Restored != want || len(res.Released) != 0 || res.RemainingAfter != int64(n) {
			b.Fatalf("reconcile: %+v, %v", res, err)
		}
		longest = max(longest, longestScript(b, rdb))
		c, us := scriptStats(b, rdb)
		calls, spent = calls+c, spent+us
		b.StartTimer()
	}
	b.ReportMetric(float64(pass.Microseconds())/1000/float64(passes), "pass-ms")
	b.ReportMetric(float64(longest.Microseconds()), "max-script-us")
	b.ReportMetric(spent/float64(calls), "mean-script-us")
	slices.Sort(timed.calls)
	b.ReportMetric(float64(timed.calls[len(timed.calls)/2].Microseconds()), "p50-call-us")
	b.ReportMetric(float64(timed.calls[len(timed.calls)*99/100].Microseconds()), "p99-call-us")
	b.ReportMetric(float64(len(timed.calls))/float64(passes), "calls/pass")
}

// scriptStats reads from INFO commandstats how many script calls Redis ran
// since the last CONFIG RESETSTAT, and the microseconds they took.
func scriptStats(tb testing.TB, rdb *redis.Client) (calls int, usec float64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(tb, err)
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(tb, err, "%s", line)
			switch k {
			case "calls":
				calls += int(n)
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// timedScripter records how long each script call of a benchmark's passes
// took, as the caller sees it. Recording stops while the timer is off: the
// set-up's calls are not the pass's.
type timedScripter struct {
	redis.Scripter
	record bool
	calls  []time.Duration
}

func (t *timedScripter) time(start time.Time) {
	if t.record {
		t.calls = append(t.calls, time.Since(start))
	}
}

func (t *timedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	defer t.time(time.Now())
	return t.Scripter.Eval(ctx, script, keys, args...)
}

func (t *timedScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	defer t.time(time.Now())
	return t.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (t *timedScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	defer t.time(time.Now())
	return t.Scripter.EvalRO(ctx, script, keys, args...)
}

func (t *timedScripter) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	defer t.time(time.Now())
	return t.Scripter.EvalShaRO(ctx, sha, keys, args...)
}

// logSlow makes Redis's SLOWLOG record every command that takes 100 us or
// more until cleanup. Not every command: SLOWLOG records the commands a
// script calls as well, and an entry for each of them would slow the script
// down many times over.
func logSlow(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	old, err := rdb.ConfigGet(ctx, "slowlog-*").Result()
	require.NoError(tb, err)
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "100").Err())
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err())
	tb.Cleanup(func() {
		for k, v := range old {
			_ = rdb.ConfigSet(ctx, k, v).Err()
		}
	})
}

// longestScript is the longest EVAL/EVALSHA in Redis's SLOWLOG.
func longestScript(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	entries, err := rdb.SlowLogGet(context.Background(), -1).Result()
	require.NoError(tb, err)
	var longest time.Duration
	for _, e := range entries {
		if len(e.Args) > 0 && strings.HasPrefix(strings.ToLower(e.Args[0]), "eval") {
			longest = max(longest, e.Duration)
		}
	}
	return longest
}

func TestYoung(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"1:1000", true},
		{"1:999", true}, // admitted at the cutoff: kept
		{"1:998", false},
		{"1:0", false},
		{"1:", false},
		{"1", false},
		{"1:+1000", false},
		{"1:-1000", false},
		{"1:10x", false},
		{"a:b:1500", true},
	}
	for _, tt := range tests {
		if got := young(tt.value, 999); got != tt.want {
			t.Errorf("young(%q, 999) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// The grace is judged at the database's read (readAt), not when the pass
// reaches the hold: a hold admitted just before the read, whose row may have
// committed just after it, is kept however late the pass runs (a Redis pause
// or a slow machine between the two once freed such holds and refused their
// orders' retries until the next pass restored them). Reconcile, which reads
// the clock when called, frees it.
func TestReconcileJudgesGraceAtTheDatabaseRead(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	v := testMeta(5, 1)
	now, err := g.Clock(ctx, testCode(t, g, "clock"))
	require.NoError(t, err)
	admitted := time.UnixMilli(now - 5_000).UTC() // 5 s ago
	const grace = 2 * time.Second

	code := testCode(t, g, "late")
	loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1, AdmittedAt: admitted})
	// The database was read half a second after the admission: "a" had no row
	// yet, and its write had 2 s to land.
	res, err := g.ReconcileDetailed(ctx, code, v, nil, now-4_500, grace)
	require.NoError(t, err)
	assert.Empty(t, res.Released, "admitted within the grace before the read: kept")
	owners, _ := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"a": 1}, owners)

	// Read now: "a" was 5 s old then, past the grace.
	res, err = g.ReconcileDetailed(ctx, code, v, nil, now, grace)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, res.Released, "older than the grace at the read: freed")

	code = testCode(t, g, "call")
	loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1, AdmittedAt: admitted})
	r, err := g.Reconcile(ctx, code, v, nil, grace)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, r.Released, "Reconcile judges at its call")
}
