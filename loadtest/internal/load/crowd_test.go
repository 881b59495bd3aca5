package load

import (
	"strings"
	"testing"
)

func TestNewPlan(t *testing.T) {
	tests := []struct {
		c                       Crowd
		wantOrders, wantRetries int
		wantCustomers           int
		perUser, wantDemand     int
	}{
		{Crowd{Requests: 20000, Customers: 15000, Retry: 0.10, Seed: 1}, 18000, 2000, 15000, 1, 15000},
		{Crowd{Requests: 1000, Customers: 100, Retry: 0.10, Seed: 2}, 900, 100, 100, 2, 200},
		{Crowd{Requests: 100, Customers: 1000, Retry: 0, Seed: 3}, 100, 0, 100, 1, 100},
		{Crowd{Requests: 10, Customers: 5, Retry: 1, Seed: 4}, 1, 9, 1, 1, 1}, // the first request is never a retry
		{Crowd{Requests: 0, Customers: 5, Retry: 0.5}, 0, 0, 0, 1, 0},
	}
	for _, tt := range tests {
		p := NewPlan("CODE", tt.c)
		if len(p.Requests) != tt.c.Requests || len(p.Orders) != tt.wantOrders || p.Retries != tt.wantRetries {
			t.Errorf("NewPlan(%+v): %d requests, %d orders, %d retries; want %d, %d, %d",
				tt.c, len(p.Requests), len(p.Orders), p.Retries, tt.c.Requests, tt.wantOrders, tt.wantRetries)
		}
		if got := p.DistinctCustomers(); got != tt.wantCustomers {
			t.Errorf("NewPlan(%+v).DistinctCustomers() = %d, want %d", tt.c, got, tt.wantCustomers)
		}
		if got := p.Demand(tt.perUser); got != tt.wantDemand {
			t.Errorf("NewPlan(%+v).Demand(%d) = %d, want %d", tt.c, tt.perUser, got, tt.wantDemand)
		}
		// Each order is first sent by a new-order request, retries only after it.
		sent := map[int32]bool{}
		next := int32(0)
		for i, o := range p.Requests {
			if !sent[o] {
				if o != next {
					t.Fatalf("NewPlan(%+v): request %d sends order %d first, want %d", tt.c, i, o, next)
				}
				sent[o] = true
				next++
			}
		}
		ids := map[string]bool{}
		for _, o := range p.Orders {
			if ids[o.ID] || !strings.HasPrefix(o.ID, "CODE-") || len(o.ID) > 64 {
				t.Errorf("NewPlan(%+v): order id %q repeated, unprefixed or too long", tt.c, o.ID)
			}
			ids[o.ID] = true
		}
	}
}

func TestNewPlanIsDeterministic(t *testing.T) {
	c := Crowd{Requests: 5000, Customers: 300, Retry: 0.2, Seed: 9}
	a, b := NewPlan("X", c), NewPlan("X", c)
	for i := range a.Requests {
		if a.Requests[i] != b.Requests[i] {
			t.Fatalf("NewPlan(%+v) twice: request %d differs (%d, %d)", c, i, a.Requests[i], b.Requests[i])
		}
	}
}
