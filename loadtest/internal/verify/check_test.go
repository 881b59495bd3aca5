package verify

import (
	"testing"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/gate"
)

// A small sale: 4 orders from 3 customers (customer 1 twice), one retry of
// order 0, 2 uses. Orders 0 and 1 are admitted.
func checkFixture() Outcome {
	p := load.Plan{
		Orders: []load.Order{{ID: "S-0", Customer: 1, Amount: 0}, {ID: "S-1", Customer: 2, Amount: 0}, {ID: "S-2", Customer: 3, Amount: 0}, {ID: "S-3", Customer: 1, Amount: 0}},
		// request: 0 1 2 3 4 (4 retries order 0)
		Requests: []int32{0, 1, 2, 3, 0},
		Retries:  1,
	}
	shots := []load.Shot{
		{Req: 0, Status: 201, OrderID: "S-0"},
		{Req: 1, Status: 201, OrderID: "S-1"},
		{Req: 2, Status: 409, Code: "OUT_OF_STOCK"},
		{Req: 3, Status: 409, Code: "ALREADY_USED"},
		{Req: 4, Status: 201, OrderID: "S-0"},
	}
	return Outcome{
		Spec:  VoucherSpec{Code: "S", Stock: 2, PerUser: 1, Flash: true},
		Plan:  p,
		Shots: shots,
		DB: DBState{TotalLimit: 2, Used: 2, PerUser: 1, ByStatus: map[string]int{"RESERVED": 2},
			Active: map[string]int64{"S-0": 1, "S-1": 2}, MaxUsage: 1},
		Redis: &gate.State{Remaining: 0, Orders: []gate.Order{{OrderID: "S-0"}, {OrderID: "S-1"}}},
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name     string
		change   func(*Outcome)
		wantFail []string
	}{
		{"clean", func(*Outcome) {}, nil},
		{"oversold", func(o *Outcome) {
			o.DB.Used, o.DB.TotalLimit = 3, 2
			o.DB.Active["S-2"] = 3
		}, []string{"no oversell", "DB active rows = admitted", "Redis remaining = DB remaining"}},
		{"a 201 without its row", func(o *Outcome) {
			delete(o.DB.Active, "S-1")
			o.DB.Used = 1
		}, []string{"DB active rows = admitted", "every 201 has its DB row", "Redis remaining = DB remaining"}},
		{"row of another customer", func(o *Outcome) { o.DB.Active["S-1"] = 9 }, []string{"every 201 has its DB row"}},
		{"a retry refused", func(o *Outcome) { o.Shots[4] = load.Shot{Req: 4, Status: 409, Code: "OUT_OF_STOCK"} },
			[]string{"retries answered alike"}},
		{"customer above the limit", func(o *Outcome) {
			o.Shots[3] = load.Shot{Req: 3, Status: 201, OrderID: "S-3"}
			o.Spec.Stock, o.DB.TotalLimit, o.DB.Used = 3, 3, 3
			o.DB.Active["S-3"] = 1
			o.DB.MaxUsage = 2
			o.Redis.Orders = append(o.Redis.Orders, gate.Order{OrderID: "S-3"})
		}, []string{"no customer above its limit"}},
		{"Redis apart from the DB", func(o *Outcome) { o.Redis.Remaining = 1 }, []string{"Redis remaining = DB remaining"}},
		{"not loaded in Redis", func(o *Outcome) { o.Redis = nil }, []string{"Redis remaining = DB remaining"}},
		{"undersold", func(o *Outcome) {
			o.Shots[1] = load.Shot{Req: 1, Status: 409, Code: "OUT_OF_STOCK"}
			delete(o.DB.Active, "S-1")
			o.DB.Used = 1
			o.Redis.Remaining = 1
			o.Redis.Orders = o.Redis.Orders[:1]
		}, []string{"admitted = min(stock, demand)"}},
		{"used_count apart from the rows", func(o *Outcome) { o.DB.Used = 1; o.Redis.Remaining = 1 },
			[]string{"used_count = active rows"}},
		{"an admission hidden by a failed request", func(o *Outcome) {
			// Order 1's answer was lost: a bound, not a failure.
			o.Shots[1] = load.Shot{Req: -1, Status: 0, Err: "timeout"}
			o.Errors = 1
		}, nil},
		{"standard voucher: no Redis check", func(o *Outcome) { o.Spec.Flash, o.Redis = false, nil }, nil},
	}
	for _, tt := range tests {
		o := checkFixture()
		tt.change(&o)
		var failed []string
		for _, c := range Checks(o) {
			if !c.Pass {
				failed = append(failed, c.Name)
			}
		}
		if len(failed) != len(tt.wantFail) {
			t.Errorf("%s: Checks failed %q, want %q", tt.name, failed, tt.wantFail)
			continue
		}
		for i := range failed {
			if failed[i] != tt.wantFail[i] {
				t.Errorf("%s: Checks failed %q, want %q", tt.name, failed, tt.wantFail)
				break
			}
		}
	}
}
