package load

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lean sender sends every planned request once, at its rate, and reads
// each answer into its Shot: status, the error code of a refusal, the orderId
// of a 201, tied to its request. A server that closes every third connection
// after its answer, and one that asks to close, costs no request.
func TestSendLean(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Customer int64  `json:"customerId"`
			OrderID  string `json:"orderId"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		n := served.Add(1)
		if n%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "application/json")
		if body.Customer%2 == 0 {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"orderId":"` + body.OrderID + `","discountAmount":1}`))
			return
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK","message":"none left"}`))
	}))
	defer srv.Close()

	plan := NewPlan("LEAN", Crowd{Requests: 300, Customers: 100, Retry: 0.1, Seed: 3})
	bodies := make([][]byte, len(plan.Orders))
	for i, o := range plan.Orders {
		bodies[i] = reserveBody(o, 5000)
	}
	start := time.Now()
	v, err := sendLean(context.Background(), srv.URL+"/vouchers/LEAN/reservations", bodies, plan, 1000,
		AttackOptions{MaxWorkers: 64, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("300 requests at 1000/s took %v, want about 300ms", took)
	}
	if len(v.Shots) != 300 || served.Load() != 300 {
		t.Fatalf("sendLean sent %d shots, server served %d; want 300 and 300", len(v.Shots), served.Load())
	}
	seen := map[int32]bool{}
	for _, sh := range v.Shots {
		o := plan.Orders[plan.Requests[sh.Req]]
		seen[sh.Req] = true
		switch {
		case sh.Err != "":
			t.Errorf("request %d: %s", sh.Req, sh.Err)
		case o.Customer%2 == 0 && (sh.Status != 201 || sh.OrderID != o.ID):
			t.Errorf("request %d = %d %q, want 201 %q", sh.Req, sh.Status, sh.OrderID, o.ID)
		case o.Customer%2 == 1 && (sh.Status != 409 || sh.Code != "OUT_OF_STOCK"):
			t.Errorf("request %d = %d %q, want 409 OUT_OF_STOCK", sh.Req, sh.Status, sh.Code)
		}
	}
	if len(seen) != 300 {
		t.Errorf("%d distinct requests answered, want 300", len(seen))
	}
}

// With LocalIP set, every request leaves from that address: the server sees
// it as the peer, as the edge's per-client limits do.
func TestSendLeanLocalIP(t *testing.T) {
	var mu sync.Mutex
	peers := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		peers[host]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK"}`))
	}))
	defer srv.Close()
	plan := NewPlan("LOCAL", Crowd{Requests: 40, Customers: 40, Seed: 1})
	bodies := make([][]byte, len(plan.Orders))
	for i, o := range plan.Orders {
		bodies[i] = reserveBody(o, 5000)
	}
	v, err := sendLean(context.Background(), srv.URL+"/vouchers/LOCAL/reservations", bodies, plan, 2000,
		AttackOptions{MaxWorkers: 8, Timeout: 5 * time.Second, LocalIP: "127.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Shots) != 40 || peers["127.0.0.2"] != 40 || len(peers) != 1 {
		t.Errorf("sendLean from 127.0.0.2: %d shots, peers %v; want 40 shots, all from 127.0.0.2", len(v.Shots), peers)
	}
}

// The workers started up front open their connections before the first
// request leaves (as wrk2 does). Against a server that answers at once, a
// sender that dialled only when every worker was busy would need one or two
// connections for 200 requests at 2,000/s; it opens all 20. (What the server
// had accepted when the first request arrived is no measure: its accept loop
// may run after connections the client has finished dialling.)
func TestSendLeanOpensUpFrontConnections(t *testing.T) {
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	plan := NewPlan("UPFRONT", Crowd{Requests: 200, Customers: 200, Seed: 1})
	bodies := make([][]byte, len(plan.Orders))
	for i, o := range plan.Orders {
		bodies[i] = reserveBody(o, 5000)
	}
	o := AttackOptions{Workers: 20, MaxWorkers: 64, Timeout: 5 * time.Second}
	v, err := sendLean(context.Background(), srv.URL+"/vouchers/UPFRONT/reservations", bodies, plan, 2000, o)
	require.NoError(t, err)
	require.Len(t, v.Shots, 200)
	for _, sh := range v.Shots {
		require.Empty(t, sh.Err)
	}
	// Every connection was dialled before sendLean returned; the server's
	// accept loop may count the last of them a moment later.
	require.Eventually(t, func() bool { return accepted.Load() >= 20 }, 5*time.Second, 10*time.Millisecond,
		"connections accepted: %d, want the 20 workers' started up front", accepted.Load())
}

// UpFront: --workers when set, else the requests the rate sends in the
// latency SLO (100 ms), at least 64; never above --max-workers.
func TestUpFront(t *testing.T) {
	for _, c := range []struct {
		o    AttackOptions
		rate float64
		want int
	}{
		{AttackOptions{MaxWorkers: 4096}, 5000, 500},
		{AttackOptions{MaxWorkers: 4096}, 100, 64},
		{AttackOptions{MaxWorkers: 256}, 50_000, 256},
		{AttackOptions{Workers: 32, MaxWorkers: 4096}, 5000, 32},
		{AttackOptions{Workers: 300, MaxWorkers: 8}, 5000, 8},
		{DefaultAttack, 5000, 500},
	} {
		if got := c.o.UpFront(c.rate); got != c.want {
			t.Errorf("%+v.UpFront(%v) = %d, want %d", c.o, c.rate, got, c.want)
		}
	}
}
