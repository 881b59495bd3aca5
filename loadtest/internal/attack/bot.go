package attack

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/voucher"
)

// botSizes size the bot attack: a bot at one address sends Requests
// reserves, each for a made-up customer of its own, at Rate on a voucher of
// Stock uses, while Customers real customers, each at an address of its own,
// place one order each, spread over the bot's run.
type botSizes struct {
	Requests  int
	Rate      float64
	Stock     int
	Customers int
}

var (
	botFull  = botSizes{Requests: 10_000, Rate: 2000, Stock: 1000, Customers: 50}
	botShort = botSizes{Requests: 2000, Rate: 1000, Stock: 1000, Customers: 20}
)

const (
	// codeRateLimited is the error code of a request over its client's limit.
	codeRateLimited = voucher.CodeRateLimited
	// The proxy's per-client limit in this attack: CLIENT_RATE, CLIENT_BURST.
	botClientRate  = 20
	botClientBurst = 20
	botIP          = "127.0.0.2"
	// botSlack is "about" in "about CLIENT_RATE a second": the bot's share
	// may exceed rate x time + burst by this factor.
	botSlack = 1.1
	// customerAttempts is how often a real customer sends its order while
	// the answer is a 503 (waiting the Retry-After it is given).
	customerAttempts = 3
)

// customerIP is the address of real customer i: 127.0.0.10 and up.
func customerIP(i int) string { return fmt.Sprintf("127.0.%d.%d", (10+i)/250, (10+i)%250+1) }

// runBot sends the bot's flood and the real customers' orders in the same
// run, on a proxy started with CLIENT_RATE=20 CLIENT_BURST=20.
func runBot(ctx context.Context, cfg Config) (*Result, error) {
	z := botFull
	if cfg.Short {
		z = botShort
	}
	r, err := startRig(ctx, cfg, Auth{}, nil,
		[]string{"CLIENT_RATE=" + strconv.Itoa(botClientRate), "CLIENT_BURST=" + strconv.Itoa(botClientBurst)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "bot", z.Stock)
	if err != nil {
		return nil, err
	}
	url := load.ReserveURL(r.st.ProxyURL, code)
	plan := load.NewPlan(code, load.Crowd{Requests: z.Requests, Customers: z.Requests, Seed: 7})
	spread := time.Duration(float64(z.Requests) / z.Rate * float64(time.Second))
	var bought int
	var customers statusCount
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bought, customers = realCustomers(ctx, url, code, z.Customers, spread)
	}()
	o := load.DefaultAttack
	o.Timeout, o.LocalIP = 5*time.Second, botIP
	bot := load.Fire(ctx, url, plan, load.OrderAmount, z.Rate, o)
	wg.Wait()
	probe, err := probeLimited(ctx, url, code)
	if err != nil {
		return nil, err
	}
	return judgeBot(z, bot, bought, customers, probe), nil
}

// realCustomers places one order for each of n customers, customer i from
// an address of its own at i/n of spread, each sent again after a 503 as the
// API asks; it returns how many bought and every answer.
func realCustomers(ctx context.Context, url, code string, n int, spread time.Duration) (int, statusCount) {
	var mu sync.Mutex
	bought, seen := 0, statusCount{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		load.Sleep(ctx, time.Until(start.Add(spread*time.Duration(i)/time.Duration(n))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := clientFrom(customerIP(i), 1)
			defer client.CloseIdleConnections()
			body := reserveBody(fmt.Sprintf("%s-real%d", code, i), 50_000_000+int64(i))
			for attempt := 0; attempt < customerAttempts && ctx.Err() == nil; attempt++ {
				a, err := call(ctx, client, http.MethodPost, url, "", body)
				key := a.String()
				if err != nil {
					key = "transport error"
				}
				mu.Lock()
				seen[key]++
				if a.Status == http.StatusCreated {
					bought++
				}
				mu.Unlock()
				if a.Status != http.StatusServiceUnavailable {
					return
				}
				wait, _ := strconv.Atoi(a.RetryAfter)
				load.Sleep(ctx, time.Duration(max(wait, 1))*time.Second)
			}
		}()
	}
	wg.Wait()
	return bought, seen
}

// limitProbe is the first answer of the bot's address that was not a 201.
type limitProbe struct {
	answer answer
	sent   int
}

// probeLimited sends fresh orders from the bot's address one after another,
// right after its flood, until one is refused (at most two bursts' worth):
// the refusal a limited client is given.
func probeLimited(ctx context.Context, url, code string) (limitProbe, error) {
	client := clientFrom(botIP, 1)
	defer client.CloseIdleConnections()
	var p limitProbe
	for p.sent < 2*botClientBurst+1 {
		p.sent++
		a, err := call(ctx, client, http.MethodPost, url, "", reserveBody(fmt.Sprintf("%s-probe%d", code, p.sent), 90_000_000+int64(p.sent)))
		if err != nil {
			return p, err
		}
		if p.answer = a; a.Status != http.StatusCreated {
			return p, nil
		}
	}
	return p, nil
}

// judgeBot holds the bot to its share and the real customers to their buys.
func judgeBot(z botSizes, bot load.Volley, bought int, customers statusCount, probe limitProbe) *Result {
	res := &Result{Scenario: "bot"}
	statuses := statusCount{}
	uses := 0
	var first, last time.Time
	for _, s := range bot.Shots {
		statuses[load.StatusKey(s)]++
		if s.Status == http.StatusCreated {
			uses++
		}
		if first.IsZero() || s.At.Before(first) {
			first = s.At
		}
		if end := s.At.Add(s.Latency); end.After(last) {
			last = end
		}
	}
	span := last.Sub(first)
	share := int(math.Ceil(botClientRate*span.Seconds()*botSlack)) + botClientBurst
	limited := statuses[strconv.Itoa(http.StatusTooManyRequests)+" "+codeRateLimited]
	refused := len(bot.Shots) - uses
	res.figure("bot at %s: %d requests at %.0f/s over %.1f s, %d made-up customers, on %d uses: %s",
		botIP, len(bot.Shots), z.Rate, span.Seconds(), z.Requests, z.Stock, statuses)
	res.figure("real customers at their own addresses: %d of %d bought: %s", bought, z.Customers, customers)
	res.figure("probe from the bot's address after its flood: %s (Retry-After %q) after %d orders", probe.answer, probe.answer.RetryAfter, probe.sent)

	res.want("bot's uses <= about CLIENT_RATE x time + CLIENT_BURST", uses <= share,
		"%d uses in %.1f s, share %d (%d/s x %.1f s x %.1f + %d)", uses, span.Seconds(), share, botClientRate, span.Seconds(), botSlack, botClientBurst)
	res.want("bot's excess answered 429 RATE_LIMITED", refused > 0 && limited*10 >= refused*9,
		"%d of %d refused requests were 429 %s", limited, refused, codeRateLimited)
	wait, _ := strconv.Atoi(probe.answer.RetryAfter)
	res.want("429 carries Retry-After", probe.answer.Status == http.StatusTooManyRequests &&
		probe.answer.Code == codeRateLimited && wait >= 1,
		"the limited bot was answered %s with Retry-After %q", probe.answer, probe.answer.RetryAfter)
	res.want("real customers at other addresses still buy", bought == z.Customers, "%d of %d bought", bought, z.Customers)
	return res.finish()
}
