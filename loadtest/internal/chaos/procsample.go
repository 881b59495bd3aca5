package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// ProcSample is one instance's memory and goroutines at one moment, from its
// /metrics (the Go and process collectors).
type ProcSample struct {
	At         float64 `json:"atSeconds"` // since the soak started
	Instance   string  `json:"instance"`  // ledger-a, ledger-b, proxy-a, proxy-b
	RSSMB      float64 `json:"rssMB"`
	Goroutines int     `json:"goroutines"`
	// Conns is flashgate_http_open_connections: the clients' connections,
	// idle keep-alive ones included, one goroutine each.
	Conns   int     `json:"connections"`
	Started float64 `json:"startedUnix"` // process_start_time_seconds: a new value is a restart
}

// sampler reads every fleet member's /metrics each interval until stopped.
type sampler struct {
	mu      sync.Mutex
	samples []ProcSample
	stop    context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, f *fleet, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{stop: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	start := time.Now()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			for _, m := range f.members {
				p, err := readProc(ctx, client, "http://"+m.addr+api.MetricsPath)
				if err != nil {
					continue // down (killed, restarting): no sample
				}
				p.At, p.Instance = time.Since(start).Seconds(), m.svc.Name
				s.mu.Lock()
				s.samples = append(s.samples, p)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the samples.
func (s *sampler) finish() []ProcSample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

func readProc(ctx context.Context, client *http.Client, url string) (ProcSample, error) {
	var p ProcSample
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return p, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return p, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return p, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := 0
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			p.RSSMB, found = v/(1<<20), found+1
		case "go_goroutines":
			p.Goroutines, found = int(v), found+1
		case "process_start_time_seconds":
			p.Started, found = v, found+1
		}
		if strings.HasPrefix(name, "flashgate_http_open_connections") {
			p.Conns = int(v)
		}
	}
	if found < 3 {
		return p, fmt.Errorf("GET %s: no process_resident_memory_bytes, go_goroutines or process_start_time_seconds", url)
	}
	return p, sc.Err()
}

// flatChecks compares each kind's (proxies', ledgers') RSS and goroutines,
// summed over its instances, between the window after warm-up and the last
// one: the floor (least) of each window, since faults raise the counts for a
// moment and a leak raises the floor. Growth above maxGrowth fails. The
// goroutines are those beyond one per open client connection: a fault that
// holds requests makes the clients open connections, which then stay open,
// idle, for as long as the clients keep them (a proxy's went from 200 to 800
// goroutines that way, and stayed); a leak grows beside them.
func flatChecks(samples []ProcSample, warm, last [2]float64, maxGrowth float64) []verify.Check {
	var cs []verify.Check
	for _, k := range [][2]string{{"proxy", "proxies'"}, {"ledger", "ledgers'"}} {
		kind, kinds := k[0], k[1]
		sums := sumByTime(samples, kind)
		for _, what := range []string{"RSS", "goroutines"} {
			a, b := floorIn(sums, warm, what), floorIn(sums, last, what)
			growth := 0.0
			if a > 0 {
				growth = b/a - 1
			}
			cs = append(cs, verify.Check{Name: fmt.Sprintf("%s %s %s", checkFlat, kinds, what), Pass: a > 0 && b > 0 && growth <= maxGrowth,
				Detail: fmt.Sprintf("least %s of both %ss together: %.0f in %.0f-%.0f s, %.0f in %.0f-%.0f s: %+.1f%% (bound +%.0f%%); %d restarts of a %s in the run",
					whatOf[what], kind, a, warm[0], warm[1], b, last[0], last[1], 100*growth, 100*maxGrowth, restarts(samples, kind), kind)})
		}
	}
	return cs
}

const checkFlat = "flat after warm-up:"

var whatOf = map[string]string{"RSS": "RSS", "goroutines": "goroutines beyond one per open connection"}

type procSum struct {
	at         float64
	rss        float64
	goroutines float64
}

// sumByTime sums the kind's instances per sampling round (samples of one round
// are within a second), keeping only rounds where both answered.
func sumByTime(samples []ProcSample, kind string) []procSum {
	var out []procSum
	var cur procSum
	n := 0
	flush := func() {
		if n == 2 {
			out = append(out, cur)
		}
		cur, n = procSum{}, 0
	}
	for _, s := range samples {
		if !strings.HasPrefix(s.Instance, kind) {
			continue
		}
		if n > 0 && s.At-cur.at > 1 {
			flush()
		}
		if n == 0 {
			cur.at = s.At
		}
		cur.rss += s.RSSMB
		cur.goroutines += float64(s.Goroutines - s.Conns)
		n++
	}
	flush()
	return out
}

func floorIn(sums []procSum, window [2]float64, what string) float64 {
	least := 0.0
	for _, s := range sums {
		if s.at < window[0] || s.at > window[1] {
			continue
		}
		v := s.rss
		if what == "goroutines" {
			v = s.goroutines
		}
		if least == 0 || v < least {
			least = v
		}
	}
	return least
}

// restarts counts the new process start times seen for the kind's instances.
func restarts(samples []ProcSample, kind string) int {
	last := map[string]float64{}
	n := 0
	for _, s := range samples {
		if !strings.HasPrefix(s.Instance, kind) {
			continue
		}
		if prev, ok := last[s.Instance]; ok && prev != s.Started {
			n++
		}
		last[s.Instance] = s.Started
	}
	return n
}
