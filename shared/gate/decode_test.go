package gate

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeReserve(t *testing.T) {
	tests := []struct {
		name      string
		v         any
		n         int
		want      []Result
		remaining int64
		wantErr   bool
	}{
		{"one reserved", []any{int64(9), int64(1)}, 1, []Result{Reserved}, 9, false},
		{"mixed", []any{int64(0), int64(1), int64(2), int64(3), int64(4), int64(6)}, 5,
			[]Result{Reserved, Duplicate, OutOfStock, AlreadyUsed, OrderConflict}, 0, false},
		{"refusals of issue 12", []any{int64(0), int64(7), int64(8), int64(9), int64(10), int64(11)}, 5,
			[]Result{Finished, Paused, NotStarted, Ended, TooSmall}, 0, false},
		{"all not loaded", []any{int64(0), int64(5), int64(5)}, 2, []Result{NotLoaded, NotLoaded}, 0, false},
		{"out of stock on negative counter", []any{int64(-3), int64(3)}, 1, []Result{OutOfStock}, -3, false},
		{"nil", nil, 1, nil, 0, true},
		{"not an array", int64(1), 1, nil, 0, true},
		{"string reply", "OK", 1, nil, 0, true},
		{"empty array", []any{}, 1, nil, 0, true},
		{"too short", []any{int64(1)}, 1, nil, 0, true},
		{"too long", []any{int64(1), int64(1), int64(1)}, 1, nil, 0, true},
		{"remaining as string", []any{"9", int64(1)}, 1, nil, 0, true},
		{"code as string", []any{int64(9), "1"}, 1, nil, 0, true},
		{"code nil", []any{int64(9), nil}, 1, nil, 0, true},
		{"code zero", []any{int64(9), int64(0)}, 1, nil, 0, true},
		{"code twelve", []any{int64(9), int64(12)}, 1, nil, 0, true},
		{"code negative", []any{int64(9), int64(-1)}, 1, nil, 0, true},
		{"code overflowing int", []any{int64(9), int64(1 << 40)}, 1, nil, 0, true},
		{"code as float", []any{int64(9), 1.0}, 1, nil, 0, true},
		{"partly not loaded", []any{int64(0), int64(5), int64(1)}, 2, nil, 0, true},
		{"not loaded with stock", []any{int64(4), int64(5)}, 1, nil, 0, true},
		{"reserved below zero", []any{int64(-1), int64(1)}, 1, nil, 0, true},
		{"zero items", []any{int64(0)}, 0, nil, 0, true},
		{"negative items", []any{int64(0)}, -1, nil, 0, true},
		{"nested array", []any{int64(0), []any{int64(1)}}, 1, nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, remaining, err := decodeReserve(tt.v, tt.n)
			if tt.wantErr {
				if err == nil {
					t.Errorf("decodeReserve(%#v, %d) = %v, %d, want error", tt.v, tt.n, got, remaining)
				}
				return
			}
			if err != nil || remaining != tt.remaining || !assert.ObjectsAreEqual(tt.want, got) {
				t.Errorf("decodeReserve(%#v, %d) = %v, %d, %v, want %v, %d", tt.v, tt.n, got, remaining, err, tt.want, tt.remaining)
			}
		})
	}
}

func TestDecodeReplies(t *testing.T) {
	meta := []any{int64(7), "100", "5", "10", "2", "1700000000000", "1700003600000", "1", "1", "1"}
	m, remaining, ok, err := decodeMeta(meta)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.EqualValues(t, 7, remaining)
	assert.Equal(t, voucher.Voucher{
		Terms: voucher.Terms{
			DiscountAmount:       100,
			MinOrderAmount:       5,
			TotalLimit:           10,
			PerUserLimit:         2,
			StartsAt:             time.UnixMilli(1700000000000).UTC(),
			EndsAt:               time.UnixMilli(1700003600000).UTC(),
			FlashSale:            true,
			Paused:               true,
			RequireCheckoutToken: true,
		},
	}, m)

	_, _, ok, err = decodeMeta([]any{})
	assert.NoError(t, err)
	assert.False(t, ok)
	for _, bad := range []any{nil, "x", meta[:9], []any{int64(7), "100", "5", "10", "2", "1", "2", "1", nil, "0"},
		[]any{int64(7), "100", "5", "10", "0", "1", "2", "1", "0", "0"}, []any{int64(7), "100", "5", "10", "1", "1", "2", "2", "0", "0"},
		[]any{int64(7), "100", "5", "10", "1", "1", "2", "1", "2", "0"}, []any{int64(7), "100", "5", "10", "1", "1", "2", "1", "0", "2"},
		[]any{int64(7), "100", "5", "10", "1", "1", "2", "1", "0", nil}, append(meta[:10:10], "0"),
		[]any{"7", "100", "5", "10", "1", "1", "2", "1", "0", "0"}, []any{int64(7), "1.5", "5", "10", "1", "1", "2", "1", "0", "0"}} {
		if _, _, _, err := decodeMeta(bad); err == nil {
			t.Errorf("decodeMeta(%#v) succeeded, want error", bad)
		}
	}

	st, loaded, err := decodeState([]any{int64(3), int64(1700000000123), []any{"b", "7:1700000000000", "a", "-2:0"}, []any{"y", "x"}})
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, State{Remaining: 3, Now: time.UnixMilli(1700000000123).UTC(), Orders: []Order{
		{OrderID: "a", CustomerID: -2},
		{OrderID: "b", CustomerID: 7, AdmittedAt: time.UnixMilli(1700000000000).UTC()},
	}, Finished: []string{"x", "y"}}, st)
	none := []any{}
	for _, bad := range []any{nil, []any{int64(3)}, []any{int64(3), int64(1), none}, []any{int64(3), int64(1), []any{"a"}, none},
		[]any{int64(3), int64(1), []any{"a", "7"}, none}, []any{int64(3), int64(1), []any{"a", "x:1"}, none},
		[]any{int64(3), int64(1), []any{"a", "7:x"}, none}, []any{int64(3), int64(1), []any{"a", int64(7)}, none},
		[]any{int64(3), int64(1), none, []any{int64(7)}}, []any{int64(3), int64(1), none, "x"},
		[]any{int64(3), int64(1), "a", "7:1"}, []any{int64(3), int64(1), none, none, none}} {
		if _, _, err := decodeState(bad); err == nil {
			t.Errorf("decodeState(%#v) succeeded, want error", bad)
		}
	}

	rr, err := decodeReconcile([]any{int64(1), int64(5), int64(3), int64(1), int64(1), "z", "y"})
	require.NoError(t, err)
	assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 5, RemainingAfter: 3, Restored: 1, TermsChanged: true, Released: []string{"y", "z"}}, rr)
	rr, err = decodeReconcile([]any{int64(0)})
	require.NoError(t, err)
	assert.False(t, rr.Loaded)
	for _, bad := range []any{nil, []any{}, []any{int64(0), int64(1)}, []any{int64(2)}, []any{int64(1), int64(5), int64(3)},
		[]any{int64(1), int64(5), int64(3), int64(0)}, []any{int64(1), int64(5), int64(-1), int64(0), int64(0)},
		[]any{int64(1), int64(5), int64(3), int64(0), int64(2)}, []any{int64(1), int64(5), int64(3), int64(0), "0"},
		[]any{int64(1), int64(5), int64(3), int64(0), int64(0), int64(9)}} {
		if _, err := decodeReconcile(bad); err == nil {
			t.Errorf("decodeReconcile(%#v) succeeded, want error", bad)
		}
	}

	sp, err := decodeScan([]any{int64(1), int64(5), int64(1000), "17", []any{"a", "1:7"}})
	require.NoError(t, err)
	assert.Equal(t, scanPage{loaded: true, remaining: 5, now: 1000, cursor: "17", fields: []string{"a", "1:7"}}, sp)
	sp, err = decodeScan([]any{int64(0)})
	require.NoError(t, err)
	assert.False(t, sp.loaded)
	for _, bad := range []any{nil, []any{}, []any{int64(0), int64(1)}, []any{int64(1), int64(5), int64(1), "0"},
		[]any{int64(1), "5", int64(1), "0", none}, []any{int64(1), int64(5), int64(1), int64(0), none},
		[]any{int64(1), int64(5), int64(1), "", none}, []any{int64(1), int64(5), int64(1), "0", []any{"a"}},
		[]any{int64(1), int64(5), int64(1), "0", []any{"a", int64(1)}}, []any{int64(2), int64(5), int64(1), "0", none}} {
		if _, err := decodeScan(bad); err == nil {
			t.Errorf("decodeScan(%#v) succeeded, want error", bad)
		}
	}

	re, err := decodeReconcileEnd([]any{int64(1), int64(5), int64(3), int64(1), int64(0)})
	require.NoError(t, err)
	assert.Equal(t, ReconcileDetail{ReconcileResult: ReconcileResult{Loaded: true, RemainingBefore: 5, RemainingAfter: 3}, CounterRepaired: true}, re)
	re, err = decodeReconcileEnd([]any{int64(0)})
	require.NoError(t, err)
	assert.False(t, re.Loaded)
	for _, bad := range []any{nil, []any{}, []any{int64(0), int64(1)}, []any{int64(1), int64(5), int64(3), int64(0)},
		[]any{int64(1), int64(5), int64(-1), int64(0), int64(0)}, []any{int64(1), int64(5), int64(3), int64(2), int64(0)},
		[]any{int64(1), int64(5), int64(3), int64(0), int64(2)}, []any{int64(1), "5", int64(3), int64(0), int64(0)},
		[]any{int64(1), int64(5), int64(3), int64(0), int64(0), int64(0)}} {
		if _, err := decodeReconcileEnd(bad); err == nil {
			t.Errorf("decodeReconcileEnd(%#v) succeeded, want error", bad)
		}
	}

	ur, err := decodeUpdate([]any{int64(1), int64(0), int64(500)})
	require.NoError(t, err)
	assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 0, RemainingAfter: 500}, ur)
	ur, err = decodeUpdate([]any{int64(0)})
	require.NoError(t, err)
	assert.False(t, ur.Loaded)
	for _, bad := range []any{nil, []any{}, []any{int64(0), int64(1)}, []any{int64(2)}, []any{int64(1), int64(5)},
		[]any{int64(1), int64(5), int64(-1)}, []any{int64(1), int64(5), int64(3), int64(0)}, []any{int64(1), "5", int64(3)},
		[]any{"1", int64(5), int64(3)}} {
		if _, err := decodeUpdate(bad); err == nil {
			t.Errorf("decodeUpdate(%#v) succeeded, want error", bad)
		}
	}
}
