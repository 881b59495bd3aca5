package sale_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestPatchRaisesSoldOutFlash checks that raising totalLimit of a sold-out
// flash voucher makes Redis admit again at once, that lowering it below the
// uses held is LIMIT_BELOW_USED, and that the change is announced.
func TestPatchRaisesSoldOutFlash(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 3, 1, true))
	for i := range int64(3) {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, i+1, code+"-"+string(rune('a'+i)), 200_000).Status)
	}
	r := l.Reserve(t, code, 9, code+"-x", 200_000)
	require.Equal(t, voucher.CodeOutOfStock, r.Code(), r.Raw)

	codes := ledgertest.Subscribe(t, l)
	v := ledgertest.View(t, l.Patch(t, code, map[string]any{"totalLimit": 5}), http.StatusOK)
	assert.Equal(t, 5, v.TotalLimit)
	assert.Equal(t, 2, v.Remaining)
	ledgertest.Announced(t, codes, code)
	_, remaining, loaded, err := l.Gate.Meta(context.Background(), code)
	require.NoError(t, err)
	require.True(t, loaded)
	assert.Equal(t, int64(2), remaining, "redis remaining moved by the delta")

	assert.Equal(t, http.StatusCreated, l.Reserve(t, code, 10, code+"-y", 200_000).Status, "admitted at once")
	assert.Equal(t, http.StatusCreated, l.Reserve(t, code, 11, code+"-z", 200_000).Status)
	assert.Equal(t, voucher.CodeOutOfStock, l.Reserve(t, code, 12, code+"-w", 200_000).Code())

	r = l.Patch(t, code, map[string]any{"totalLimit": 4})
	assert.Equal(t, http.StatusConflict, r.Status, r.Raw)
	assert.Equal(t, voucher.CodeLimitBelowUsed, r.Code())
	assert.Equal(t, 5, ledgertest.View(t, l.Patch(t, code, map[string]any{"totalLimit": 5}), http.StatusOK).TotalLimit,
		"a limit equal to the uses held is fine")
	c := l.Counts(t, code)
	assert.Equal(t, 5, c.Used)
	assert.Equal(t, 5, c.Active)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// TestPatchLowersPerUserLimit checks, for both kinds of voucher, that a lower
// perUserLimit keeps the uses customers hold and stops new ones above it.
func TestPatchLowersPerUserLimit(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	for _, flash := range []bool{false, true} {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 100, 3, flash))
		for _, o := range []string{"-a", "-b", "-c"} {
			require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+o, 200_000).Status)
		}
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-d", 200_000).Status)

		v := ledgertest.View(t, l.Patch(t, code, map[string]any{"perUserLimit": 1}), http.StatusOK)
		assert.Equal(t, 1, v.PerUserLimit)
		var used, limit int
		require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT used_count, per_user_limit
			FROM voucher_customer_usage WHERE voucher_code = $1 AND customer_id = 1`, code).Scan(&used, &limit))
		assert.Equal(t, []int{3, 3}, []int{used, limit}, "flash=%v: the uses held are kept", flash)

		for _, tt := range []struct {
			customer int64
			order    string
		}{{1, "-e"}, {2, "-f"}} {
			r := l.Reserve(t, code, tt.customer, code+tt.order, 200_000)
			assert.Equal(t, voucher.CodeAlreadyUsed, r.Code(), "flash=%v customer %d: %s", flash, tt.customer, r.Raw)
		}
		assert.Equal(t, http.StatusCreated, l.Reserve(t, code, 3, code+"-g", 200_000).Status, "flash=%v", flash)
		assert.Equal(t, voucher.CodeAlreadyUsed, l.Reserve(t, code, 3, code+"-h", 200_000).Code(), "flash=%v", flash)
		c := l.Counts(t, code)
		assert.Equal(t, 5, c.Active, "flash=%v", flash)
	}
}

// TestPatchDiscountNewReservationsOnly checks that a new discountAmount applies
// to new reservations only: older ones keep theirs, and confirm answers it.
func TestPatchDiscountNewReservationsOnly(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	for _, flash := range []bool{false, true} {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 100, 1, flash))
		r := l.Reserve(t, code, 1, code+"-old", 500_000)
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		assert.EqualValues(t, 100_000, r.Body["discountAmount"])

		ledgertest.View(t, l.Patch(t, code, map[string]any{"discountAmount": 250_000}), http.StatusOK)
		r = l.Reserve(t, code, 2, code+"-new", 500_000)
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		assert.EqualValues(t, 250_000, r.Body["discountAmount"], "flash=%v: a new reservation takes the new discount", flash)
		r = l.Reserve(t, code, 3, code+"-small", 200_000)
		assert.EqualValues(t, 200_000, r.Body["discountAmount"], "flash=%v: capped at the order amount", flash)

		r = l.Call(t, http.MethodGet, "/vouchers/"+code+"/reservations/"+code+"-old", nil)
		assert.EqualValues(t, 100_000, r.Body["discountAmount"], "flash=%v: the old reservation keeps its discount", flash)
		r = l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations/"+code+"-old/confirm", nil)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		assert.EqualValues(t, 100_000, r.Body["discountAmount"], "flash=%v: confirm answers the reservation's discount", flash)
		r = l.Reserve(t, code, 1, code+"-old", 500_000)
		assert.EqualValues(t, 100_000, r.Body["discountAmount"], "flash=%v: a retry replays the first answer", flash)
	}
}

// TestPatchWindowAndPause checks that moving endsAt to the past and pausing
// stop a flash voucher in Redis at once, and that resuming lets it sell again.
func TestPatchWindowAndPause(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	for _, flash := range []bool{false, true} {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 100, 1, flash))
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-a", 200_000).Status)

		v := ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/pause", nil), http.StatusOK)
		assert.True(t, v.Paused)
		assert.Equal(t, voucher.StatePaused, v.State)
		ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/pause", nil), http.StatusOK) // idempotent
		r := l.Reserve(t, code, 2, code+"-b", 200_000)
		assert.Equal(t, http.StatusUnprocessableEntity, r.Status, "flash=%v: %s", flash, r.Raw)
		assert.Equal(t, voucher.ReasonPaused, r.Body["reason"], "flash=%v: %s", flash, r.Raw)
		r = l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations/"+code+"-a/confirm", nil)
		assert.Equal(t, http.StatusOK, r.Status, "flash=%v: confirm works while paused: %s", flash, r.Raw)

		v = ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/resume", nil), http.StatusOK)
		assert.False(t, v.Paused)
		assert.Equal(t, voucher.StateLive, v.State)
		ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/resume", nil), http.StatusOK)
		assert.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-b", 200_000).Status, "flash=%v", flash)

		actions := []string{}
		for _, e := range l.AuditEvents(t, code) {
			actions = append(actions, e.Action)
		}
		assert.Equal(t, []string{store.ActionCreate, store.ActionPause, store.ActionResume}, actions, "flash=%v: audit only on change", flash)

		end := time.Now().Add(-time.Second).UTC()
		v = ledgertest.View(t, l.Patch(t, code, map[string]any{"endsAt": end, "startsAt": end.Add(-time.Hour)}), http.StatusOK)
		assert.Equal(t, voucher.StateEnded, v.State)
		r = l.Reserve(t, code, 3, code+"-c", 200_000)
		assert.Equal(t, voucher.ReasonExpired, r.Body["reason"], "flash=%v: %s", flash, r.Raw)
	}
}

// TestPatchBadBodies checks that bad PATCH bodies are 400 INVALID_REQUEST and
// change nothing, and that an unknown voucher is 404.
func TestPatchBadBodies(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	s := ledgertest.Spec(code, 10, 1, true)
	l.CreateVoucher(t, s)
	before := ledgertest.View(t, l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil), http.StatusOK)
	later := s.EndsAt.Add(time.Hour).UTC().Format(time.RFC3339Nano)
	for _, body := range []string{
		``, `{}`, `[]`, `null`, `{"foo": 1}`, `{"totalLimit": 5, "foo": 1}`, `{"code": "OTHER"}`,
		`{"code": "` + code + `"}`, `{"flashSale": true}`, `{"flashSale": false, "totalLimit": 5}`,
		`{"startsAt": "` + later + `"}`,
		`{"startsAt": "2030-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"}`,
		`{"startsAt": "2030-01-02T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"}`,
		`{"endsAt": "` + s.StartsAt.UTC().Format(time.RFC3339Nano) + `"}`,
		`{"totalLimit": -1}`, `{"totalLimit": 100000001}`, `{"perUserLimit": 0}`, `{"discountAmount": 0}`,
		`{"minOrderAmount": -1}`, `{"totalLimit": "5"}`, `{"totalLimit": 5, "totalLimit": 6}`, `{"TotalLimit": 5}`,
		`{"endsAt": "tomorrow"}`, `{"totalLimit": 5} {}`,
	} {
		r := l.Patch(t, code, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, "PATCH %s = %s", body, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code(), body)
	}
	after := ledgertest.View(t, l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil), http.StatusOK)
	assert.Equal(t, before, after, "nothing changed")
	assert.Len(t, l.AuditEvents(t, code), 1, "only the create is audited")

	r := l.Patch(t, "NOPE"+code[:8], map[string]any{"totalLimit": 5})
	assert.Equal(t, http.StatusNotFound, r.Status, r.Raw)
	assert.Equal(t, voucher.CodeVoucherNotFound, r.Code())
	for _, p := range []string{"/pause", "/resume", "/audit", "/reservations", "/reservations.csv"} {
		method := http.MethodGet
		if p == "/pause" || p == "/resume" {
			method = http.MethodPost
		}
		r := l.Call(t, method, "/admin/vouchers/NOPE"+code[:8]+p, nil)
		assert.Equal(t, http.StatusNotFound, r.Status, "%s %s: %s", method, p, r.Raw)
	}
}

// TestAuditActors checks the audit trail of every admin action under the names
// of LEDGER_TOKENS, oldest first, with the terms before and after.
func TestAuditActors(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewAdmin(t)
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	path := "/admin/vouchers/" + code
	require.Equal(t, http.StatusCreated, l.CallAs(t, "alice", http.MethodPost, "/admin/vouchers", ledgertest.Spec(code, 10, 1, true)).Status)
	l.TrackFlash(code)
	// Exempt from "no repair": the test unloads the voucher itself, three
	// times, so that warmup and the reconciler's reload are audited.
	l.AllowRepairs("unloads the voucher on purpose")
	ledgertest.View(t, l.CallAs(t, "bob", http.MethodPatch, path, map[string]any{"totalLimit": 20}), http.StatusOK)
	ledgertest.View(t, l.CallAs(t, "alice", http.MethodPost, path+"/pause", nil), http.StatusOK)
	ledgertest.View(t, l.CallAs(t, "default", http.MethodPost, path+"/resume", nil), http.StatusOK)
	require.NoError(t, l.Gate.Unload(ctx, code))
	require.Equal(t, http.StatusOK, l.CallAs(t, "bob", http.MethodPost, path+"/warmup", nil).Status)
	require.Equal(t, http.StatusOK, l.CallAs(t, "alice", http.MethodPost, path+"/reconcile", nil).Status) // fixes nothing
	require.NoError(t, l.Gate.Unload(ctx, code))
	require.Equal(t, http.StatusOK, l.CallAs(t, "alice", http.MethodPost, path+"/reconcile", nil).Status) // reloads
	require.NoError(t, l.Gate.Unload(ctx, code))
	_, err := l.Jobs.Reconcile(ctx, code) // the periodic reconciler
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, ledgertest.Call(t, http.MethodPost, l.URL+path+"/pause", "nobody", nil).Status)

	events := l.AuditEvents(t, code)
	type who struct{ Actor, Action string }
	var got []who
	for i, e := range events {
		got = append(got, who{e.Actor, e.Action})
		if i > 0 {
			assert.False(t, e.At.Before(events[i-1].At), "oldest first")
		}
	}
	assert.Equal(t, []who{
		{"alice", store.ActionCreate}, {"bob", store.ActionUpdate}, {"alice", store.ActionPause}, {"default", store.ActionResume},
		{"bob", store.ActionWarmup}, {"alice", store.ActionReconcile}, {store.ReconcilerActor, store.ActionReconcile},
	}, got)
	require.Len(t, events, 7)
	assert.JSONEq(t, `null`, string(events[0].Before))
	var before, after voucher.Terms
	require.NoError(t, json.Unmarshal(events[1].Before, &before))
	require.NoError(t, json.Unmarshal(events[1].After, &after))
	assert.Equal(t, 10, before.TotalLimit)
	assert.Equal(t, 20, after.TotalLimit)
	assert.True(t, after.FlashSale)
	require.NoError(t, json.Unmarshal(events[2].After, &after))
	assert.True(t, after.Paused)
	var warm [2]sale.GateState
	require.NoError(t, json.Unmarshal(events[4].Before, &warm[0]))
	require.NoError(t, json.Unmarshal(events[4].After, &warm[1]))
	assert.Equal(t, [2]sale.GateState{{Loaded: false}, {Loaded: true, Remaining: 20}}, warm)
	var rep jobs.Report
	require.NoError(t, json.Unmarshal(events[5].After, &rep))
	assert.True(t, rep.Reloaded)
}

// TestChangeReachesOtherLedgers checks main's wiring: a ledger that watches the
// change channel forgets its cached terms when another ledger changes them,
// without waiting for the cache's TTL.
func TestChangeReachesOtherLedgers(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	other := store.New(l.Pool, time.Minute)
	frozen := time.Now()
	other.Clock = func() time.Time { return frozen } // only ForgetTerms can refresh it
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sub, ok := l.Pub.(gate.Subscriber)
	require.True(t, ok)
	forgot := make(chan string, 10)
	go gate.WatchChanges(ctx, sub, func(code string) { other.ForgetTerms(code); forgot <- code },
		slog.New(slog.NewTextHandler(io.Discard, nil)))

	v, err := other.Terms(ctx, code)
	require.NoError(t, err)
	require.False(t, v.Paused)
	deadline := time.After(5 * time.Second)
	for v.Paused == false {
		ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/pause", nil), http.StatusOK)
		select {
		case <-forgot: // the subscription may start after the first pause: pause again (idempotent)
		case <-time.After(200 * time.Millisecond):
			continue
		case <-deadline:
			t.Fatal("the change never reached the other ledger")
		}
		v, err = other.Terms(ctx, code)
		require.NoError(t, err)
	}
	assert.True(t, v.Paused)
}
