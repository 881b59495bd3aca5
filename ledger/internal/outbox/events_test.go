package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestEventsSale is the sale: 1,000 uses of a flash voucher reserved
// by concurrent clients (group commits), released, confirmed, refunded and
// expired, reserved again until sold out a second time, and a standard
// voucher changed, paused and resumed on the side. Every state change in the
// database has exactly one event; the webhook, Kafka (kfake) and the pull
// feed each get every event at least once and each voucher's in id order; the
// receiver deduplicating by id holds exactly the database's history.
func TestEventsSale(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db})
	rc := ledgertest.NewReceiver(t)
	const topic = "flashgate.events"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	k, err := outbox.NewKafka(cluster.ListenAddrs(), topic, nil)
	require.NoError(t, err)
	t.Cleanup(k.Close)
	ledgertest.RunDispatcher(t, l, db, ledgertest.FastWebhook(rc.URL, 10), k)

	flash, std := ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(flash, 1000, 2, true))
	l.CreateVoucher(t, ledgertest.Spec(std, 100, 1, false))
	ok := saleReserve(t, l, flash, 0, 1100, 0)
	require.Len(t, ok, 1000, "reserves answered 201")
	saleLifecycle(t, l, flash, ok)
	// Other customers: the first sale's may still hold two uses each (which
	// of their orders kept theirs depends on the order the 201s came in), and
	// a third would be ALREADY_USED, not OUT_OF_STOCK.
	require.Len(t, saleReserve(t, l, flash, 1100, 450, 1000), 400, "reserves after the uses came back")
	for i := range 30 {
		require.Equal(t, http.StatusCreated, l.Reserve(t, std, int64(i+1), fmt.Sprintf("%s-s%d", std, i), 5_000).Status)
	}
	require.Equal(t, http.StatusOK, l.Patch(t, std, map[string]any{"discountAmount": 2_000}).Status)
	require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, "/admin/vouchers/"+std+"/pause", nil).Status)
	require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, "/admin/vouchers/"+std+"/resume", nil).Status)
	for i := range 20 {
		require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, fmt.Sprintf("/vouchers/%s/reservations/%s-s%d/confirm", std, std, i), nil).Status)
	}

	want := ledgertest.DBEvents(t, db)
	checkHistory(t, l, want, flash, std)
	kafkaGot := consumeAll(t, cluster.ListenAddrs(), topic, len(want))
	ledgertest.WaitOr(t, 30*time.Second, "the webhook receives every event", func() bool { return distinct(rc.Events()) >= len(want) },
		func() {
			ledgertest.LogOutbox(t, db)
			seen := map[int64]bool{}
			for _, e := range rc.Events() {
				seen[e.ID] = true
			}
			var missing []int64
			for _, e := range want {
				if !seen[e.ID] {
					missing = append(missing, e.ID)
				}
			}
			t.Logf("webhook missing %v", missing)
		})
	if distinct(kafkaGot) < len(want) {
		ledgertest.LogOutbox(t, db)
	}
	ledgertest.CheckDelivered(t, "webhook", want, rc.Events())
	ledgertest.CheckDelivered(t, "kafka", want, kafkaGot)
	ledgertest.CheckDelivered(t, "feed", want, l.Feed(t, 333))
	assert.Zero(t, rc.BadSigs.Load(), "bad signatures")
	t.Logf("%d events; webhook received %d, kafka %d", len(want), len(rc.Events()), len(kafkaGot))
}

// saleReserve reserves n orders of code from 32 clients (customers
// customers+i%700+1, two uses each) and returns the orders answered 201.
func saleReserve(t *testing.T, l *ledgertest.Ledger, code string, from, n int, customers int64) []string {
	var mu sync.Mutex
	var ok []string
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				order := fmt.Sprintf("%s-%d", code, i)
				r := ledgertest.Call(t, http.MethodPost, l.URL+"/vouchers/"+code+"/reservations", l.Token, ledgertest.ClaimBody(customers+int64(i%700+1), order, 5_000))
				if r.Status == http.StatusCreated {
					mu.Lock()
					ok = append(ok, order)
					mu.Unlock()
				} else {
					assert.Contains(t, r.Raw, voucher.CodeOutOfStock, "reserve %s", order)
				}
			}
		}()
	}
	for i := from; i < from+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return ok
}

// saleLifecycle releases 150 of orders, confirms 500 (and refunds 100 of
// those) and lets 150 expire through the sweeper; 200 stay reserved.
func saleLifecycle(t *testing.T, l *ledgertest.Ledger, code string, orders []string) {
	path := func(o string) string { return fmt.Sprintf("/vouchers/%s/reservations/%s", code, o) }
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 800; i += 16 {
				o := orders[i]
				switch {
				case i < 150:
					assert.Equal(t, http.StatusNoContent, l.Call(t, http.MethodDelete, path(o), nil).Status, "release %s", o)
				case i < 650:
					assert.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, path(o)+"/confirm", nil).Status, "confirm %s", o)
					if i < 250 {
						assert.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, path(o)+"/refund", nil).Status, "refund %s", o)
					}
				}
			}
		}()
	}
	wg.Wait()
	l.Exec(t, `UPDATE voucher_redemption SET expires_at = now() - interval '1 second' WHERE order_id = ANY($1)`, orders[650:800])
	n, err := l.Jobs.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 150, n, "swept")
}

// checkHistory asserts that the events are exactly the database's history:
// each reservation's events lead to its row's state (one event per change),
// and replaying each voucher's events in id order keeps used_count within
// its bounds, emits voucher.sold_out exactly when it reaches total_limit, and
// ends at the database's used_count.
func checkHistory(t *testing.T, l *ledgertest.Ledger, evs []events.Event, codes ...string) {
	type data struct {
		OrderID string `json:"orderId"`
		Reason  string `json:"reason"`
		TookUse bool   `json:"tookUse"`
	}
	history := map[string][]string{}
	used, soldOuts, reached := map[string]int{}, map[string]int{}, map[string]int{}
	limits := map[string]int{}
	for _, code := range codes {
		limits[code] = l.Books(t, code).Total
	}
	for _, e := range evs {
		var d data
		require.NoError(t, json.Unmarshal(e.Data, &d))
		if d.OrderID != "" {
			step := e.Type
			if d.Reason != "" {
				step += ":" + d.Reason
			}
			history[d.OrderID] = append(history[d.OrderID], step)
		}
		c := e.VoucherCode
		switch {
		case e.Type == events.ReservationReserved || (e.Type == events.ReservationConfirmed && d.TookUse):
			if used[c]++; used[c] == limits[c] {
				reached[c]++
			}
		case e.Type == events.ReservationReleased || e.Type == events.ReservationRefunded:
			used[c]--
		case e.Type == events.VoucherSoldOut:
			soldOuts[c]++
			assert.Equal(t, limits[c], used[c], "event %d: sold out at used %d", e.ID, used[c])
		}
		require.True(t, used[c] >= 0 && used[c] <= limits[c], "event %d: %s used %d outside 0..%d", e.ID, c, used[c], limits[c])
	}
	var n int
	rows, err := l.Pool.Query(context.Background(), `
		SELECT order_id, status, coalesce(release_reason, '') FROM voucher_redemption WHERE voucher_code = ANY($1)`, codes)
	require.NoError(t, err)
	var order, status, reason string
	_, err = pgx.ForEachRow(rows, []any{&order, &status, &reason}, func() error {
		n++
		want := map[string][]string{
			"RESERVED":  {events.ReservationReserved},
			"CONFIRMED": {events.ReservationReserved, events.ReservationConfirmed},
			"RELEASED":  {events.ReservationReserved, events.ReservationReleased + ":" + reason},
			"REFUNDED":  {events.ReservationReserved, events.ReservationConfirmed, events.ReservationRefunded + ":REFUNDED"},
		}[status]
		assert.Equal(t, want, history[order], "order %s (%s %s)", order, status, reason)
		delete(history, order)
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, history, "events of orders the database does not have")
	for _, code := range codes {
		b := l.Books(t, code)
		assert.Equal(t, b.Used, used[code], "%s: replayed used_count", code)
		assert.Equal(t, reached[code], soldOuts[code], "%s: voucher.sold_out events", code)
	}
	assert.Equal(t, 2, soldOuts[codes[0]], "the flash voucher sold out twice")
	t.Logf("%d reservations, %d events", n, len(evs))
}

// consumeAll reads topic from the start until it holds want records (or 30 s).
func consumeAll(t *testing.T, brokers []string, topic string, want int) []events.Event {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []events.Event
	for distinct(got) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			var e events.Event
			require.NoError(t, json.Unmarshal(r.Value, &e))
			assert.Equal(t, e.VoucherCode, string(r.Key), "record key of event %d", e.ID)
			got = append(got, e)
		})
	}
	return got
}

func distinct(evs []events.Event) int {
	seen := map[int64]bool{}
	for _, e := range evs {
		seen[e.ID] = true
	}
	return len(seen)
}

// TestRolledBackChangesLeaveNoEvent: a reserve refused by a guard, a group
// commit refused whole and a change refused under the voucher's lock write
// nothing, their events included.
func TestRolledBackChangesLeaveNoEvent(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, false))
	count := func() int {
		var n int
		require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT count(*) FROM voucher_event WHERE voucher_code = $1`, code).Scan(&n))
		return n
	}
	require.Equal(t, 1, count(), "voucher.created")
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-a", 5_000).Status)
	require.Equal(t, 2, count())
	assert.Equal(t, http.StatusConflict, l.Reserve(t, code, 1, code+"-b", 5_000).Status, "second use of customer 1")
	assert.Equal(t, 2, count(), "ALREADY_USED rolled back: no event")

	v, err := l.Store.Terms(context.Background(), code)
	require.NoError(t, err)
	claims := []voucher.Claim{{CustomerID: 2, OrderID: code + "-c", OrderAmount: 5_000}, {CustomerID: 3, OrderID: code + "-d", OrderAmount: 5_000}}
	_, refused, err := l.Store.InsertMany(context.Background(), v, claims)
	require.NoError(t, err)
	assert.True(t, refused, "two claims for one use left")
	assert.Equal(t, 2, count(), "refused group commit: no event")

	assert.Equal(t, http.StatusConflict, l.Patch(t, code, map[string]any{"totalLimit": 0}).Status, "LIMIT_BELOW_USED")
	assert.Equal(t, 2, count(), "refused change: no event")
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-c", 5_000).Status)
	assert.Equal(t, 4, count(), "reserved and sold out")
}

// BenchmarkInsertManyEvents is one group commit of 64 reservations with the
// outbox's events and without (EVENTS=off): what the events add to a write.
func BenchmarkInsertManyEvents(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("events=%v", on), func(b *testing.B) {
			l := ledgertest.New(b, ledgertest.Options{NoRedis: true})
			l.Store.WriteEvents(on)
			code := ledgertest.NewCode(b)
			l.CreateVoucher(b, ledgertest.Spec(code, 100_000_000, 1, true))
			v, err := l.Store.Terms(context.Background(), code)
			require.NoError(b, err)
			b.ResetTimer()
			for i := range b.N {
				claims := make([]voucher.Claim, 64)
				for j := range claims {
					n := int64(i*64 + j + 1)
					claims[j] = voucher.Claim{CustomerID: n, OrderID: fmt.Sprintf("%s-%d", code, n), OrderAmount: 5_000}
				}
				if _, refused, err := l.Store.InsertMany(context.Background(), v, claims); err != nil || refused {
					b.Fatalf("InsertMany = %v, refused %v", err, refused)
				}
			}
		})
	}
}
