package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/api"
)

// The attacks on client keys: one bot's burst behind a NAT (nat), one /64
// with many addresses (ipv6), and the stock on the public port (stock).

// natRate is CLIENT_RATE in nat; the legitimate stream sends 10 a second.
const natRate = 20

// runNAT: a bot behind a NAT's address sends a burst of CLIENT_RATE+1 at
// once; a legitimate stream of 10 a second from the same address follows.
func runNAT(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{fmt.Sprintf("CLIENT_RATE=%d", natRate)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "nat", 1000)
	if err != nil {
		return nil, err
	}
	client, url := clientFrom("127.0.0.3", natRate+1), load.ReserveURL(r.st.ProxyURL, code)
	var mu sync.Mutex
	burst := statusCount{}
	var wg sync.WaitGroup
	for i := range natRate + 1 {
		wg.Go(func() {
			a, _ := call(ctx, client, http.MethodPost, url, "", reserveBody(fmt.Sprintf("%s-bot-%d", code, i), int64(1000+i)))
			mu.Lock()
			burst[a.String()]++
			mu.Unlock()
		})
	}
	wg.Wait()
	end := time.Now()
	var first time.Duration
	perSecond := make([]int, 3)
	for i := 0; time.Since(end) < 3*time.Second; i++ {
		a, err := call(ctx, client, http.MethodPost, url, "", reserveBody(fmt.Sprintf("%s-real-%d", code, i), int64(1+i)))
		if err == nil && a.Status == http.StatusCreated {
			at := time.Since(end)
			if first == 0 {
				first = at
			}
			perSecond[min(int(at/time.Second), 2)]++
		}
		time.Sleep(time.Until(end.Add(time.Duration(i+1) * 100 * time.Millisecond)))
	}
	res := &Result{Scenario: "nat"}
	res.figure("the bot's burst of %d at CLIENT_RATE=%d: %v; the NAT's 10/s stream served %v in seconds 0-2, first %v after the burst",
		natRate+1, natRate, burst, perSecond, first.Round(time.Millisecond))
	res.want("the NAT's legitimate stream is served within 1.5 s of the bot's burst", first > 0 && first <= 1500*time.Millisecond,
		"first 201 %v after the burst", first.Round(time.Millisecond))
	return res.finish(), nil
}

// ipv6Rate is CLIENT_RATE (and CLIENT_BURST) in ipv6.
const ipv6Rate = 5

// runIPv6: behind a trusted proxy, 60 reserves each from another address
// of one /64 (some written ip:port), then 10 from another /64.
func runIPv6(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{fmt.Sprintf("CLIENT_RATE=%d", ipv6Rate), "TRUSTED_PROXIES=127.0.0.1"})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "ipv6", 1000)
	if err != nil {
		return nil, err
	}
	client, url := clientFrom("127.0.0.1", 4), load.ReserveURL(r.st.ProxyURL, code)
	send := func(xff, order string, customer int64) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(reserveBody(order, customer))))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	start := time.Now()
	one := 0
	for i := range 60 {
		xff := fmt.Sprintf("2001:db8:1:2:%x::%x", i+1, i+7)
		if i%3 == 0 {
			xff = "[" + xff + "]:" + fmt.Sprint(40000+i)
		}
		if send(xff, fmt.Sprintf("%s-a-%d", code, i), int64(1+i)) == http.StatusCreated {
			one++
		}
	}
	took := time.Since(start)
	other := 0
	for i := range ipv6Rate {
		if send(fmt.Sprintf("2001:db8:9:9::%x", i+1), fmt.Sprintf("%s-b-%d", code, i), int64(100+i)) == http.StatusCreated {
			other++
		}
	}
	most := ipv6Rate + int(float64(ipv6Rate)*took.Seconds()) + 1
	res := &Result{Scenario: "ipv6"}
	res.figure("60 reserves from 60 addresses of one /64 in %v at CLIENT_RATE=%d: %d x 201; %d from another /64: %d x 201",
		took.Round(time.Millisecond), ipv6Rate, one, ipv6Rate, other)
	res.want("one /64 shares one budget", one <= most, "%d x 201 (at most %d)", one, most)
	res.want("another /64 has its own", other == ipv6Rate, "%d of %d", other, ipv6Rate)
	return res.finish(), nil
}

// runStock: a proxy with edge tokens (a shop's reserve token) and no
// METRICS_ADDR: its client port must not show the stock.
func runStock(ctx context.Context, cfg Config) (*Result, error) {
	const shop = "attack-shop-token"
	r, err := startRig(ctx, cfg, Auth{ProxyTokens: "shop:" + shop + ":reserve"}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "stock", 10)
	if err != nil {
		return nil, err
	}
	client := clientFrom("", 2)
	if a, err := call(ctx, client, http.MethodPost, load.ReserveURL(r.st.ProxyURL, code), shop, reserveBody(code+"-o1", 1)); err != nil || a.Status != http.StatusCreated {
		return nil, fmt.Errorf("a reserve: %v %v", a, err)
	}
	res := &Result{Scenario: "stock"}
	for _, c := range []struct{ name, token string }{{"no token", ""}, {"a shop's reserve token", shop}} {
		a, err := call(ctx, client, http.MethodGet, r.st.ProxyURL+api.MetricsPath, c.token, nil)
		if err != nil {
			return nil, err
		}
		leaks := strings.Contains(string(a.Body), "flashgate_voucher_remaining")
		res.figure("GET /metrics on the client port with %s: %v", c.name, a)
		res.want("no stock on the public port ("+c.name+")", a.Status != http.StatusOK && !leaks, "%v, stock shown %v", a, leaks)
	}
	return res.finish(), nil
}
