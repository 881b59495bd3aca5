package httpxtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/api"
)

// ShutdownLoad drives a service through its graceful stop under load, as a
// load balancer that follows /readyz would: workers send requests until the
// service is told to stop and on through SHUTDOWN_DELAY, and stop sending new
// ones 250 ms before the delay ends (by then the balancer has moved them
// elsewhere); Hold is called 400 ms before the delay ends (it must take
// effect within 150 ms) and Release 300 ms after, so that requests are in flight when the service stops
// accepting (hold what they wait on: a row lock in Postgres).
type ShutdownLoad struct {
	URL     string        // the service
	Delay   time.Duration // its SHUTDOWN_DELAY
	Workers int
	Warmup  time.Duration // load before the signal
	// Request returns worker w's i-th request.
	Request func(w, i int) (method, path string, body any)
	// Stop tells the service to stop (SIGTERM) and returns once it exited;
	// Run calls it in the background at the signal and waits for it.
	Stop    func() error
	Hold    func()
	Release func()
}

// Shot is one request's fate.
type Shot struct {
	Start, End time.Time
	Status     int
	Err        error
	Body       string
}

// Refused reports a request that never reached the service: its connection
// was refused once the service stopped accepting.
func (s Shot) Refused() bool { return errors.Is(s.Err, syscall.ECONNREFUSED) }

// ShutdownResult is what the clients saw.
type ShutdownResult struct {
	Shots        []Shot
	Signalled    time.Time     // when Signal was called
	ReadyStatus  int           // /readyz after the signal: the first 503, or the last answer within a second
	ReadyAfter   time.Duration // how long after the signal that answer came
	AfterDelay   error         // a new connection shortly after the delay ended
	InFlightHeld int           // requests sent before the drain that were answered after it began
	HeldAt       time.Time     // when Hold returned
	Exited       time.Duration // from the signal to the exit
	StopErr      error         // what Stop returned
}

// Run runs the load and returns what the clients saw.
func (o ShutdownLoad) Run(tb testing.TB) ShutdownResult {
	tb.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.Workers}}
	var res ShutdownResult
	var mu sync.Mutex
	var stopAt time.Time // no new request after it; set before the signal
	var stopMu sync.RWMutex
	var wg sync.WaitGroup
	for w := range o.Workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				stopMu.RLock()
				late := !stopAt.IsZero() && time.Now().After(stopAt)
				stopMu.RUnlock()
				if late {
					return
				}
				method, path, body := o.Request(w, i)
				s := send(client, method, o.URL+path, body)
				mu.Lock()
				res.Shots = append(res.Shots, s)
				mu.Unlock()
			}
		})
	}
	time.Sleep(o.Warmup)
	res.Signalled = time.Now()
	stopMu.Lock()
	stopAt = res.Signalled.Add(o.Delay - 250*time.Millisecond)
	stopMu.Unlock()
	drainAt := res.Signalled.Add(o.Delay)
	stopped := make(chan struct{})
	go func() {
		res.StopErr = o.Stop()
		res.Exited = time.Since(res.Signalled)
		close(stopped)
	}()
	// The signal may take a moment to arrive: poll.
	for {
		ready := send(&http.Client{Timeout: 5 * time.Second}, http.MethodGet, o.URL+api.ReadyzPath, nil)
		res.ReadyStatus, res.ReadyAfter = ready.Status, ready.End.Sub(res.Signalled)
		if ready.Status == http.StatusServiceUnavailable || res.ReadyAfter > time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	time.Sleep(time.Until(drainAt.Add(-400 * time.Millisecond)))
	o.Hold()
	res.HeldAt = time.Now()
	time.Sleep(time.Until(drainAt.Add(150 * time.Millisecond)))
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res.AfterDelay = send(fresh, http.MethodGet, o.URL+api.HealthzPath, nil).Err
	time.Sleep(time.Until(drainAt.Add(300 * time.Millisecond)))
	o.Release()
	wg.Wait()
	<-stopped
	for _, s := range res.Shots {
		if s.Start.Before(drainAt) && s.End.After(drainAt.Add(100*time.Millisecond)) {
			res.InFlightHeld++
		}
	}
	return res
}

// Count returns how many requests were answered status.
func (r ShutdownResult) Count(status int) int {
	n := 0
	for _, s := range r.Shots {
		if s.Err == nil && s.Status == status {
			n++
		}
	}
	return n
}

// Check asserts the promise of a graceful stop: an exit within 15 s of SIGTERM
// (SHUTDOWN_TIMEOUT), /readyz 503 at once, a new
// connection refused after the delay, requests in flight when the service
// stopped accepting, and every request that reached the service answered
// with its real answer: no 503 and no connection error. want lists the
// statuses real answers may have.
func (r ShutdownResult) Check(tb testing.TB, want ...int) {
	tb.Helper()
	if r.StopErr != nil {
		tb.Errorf("the service did not exit on SIGTERM: %v", r.StopErr)
	}
	tb.Logf("exited %v after SIGTERM", r.Exited)
	if r.Exited >= 15*time.Second {
		tb.Errorf("exited %v after SIGTERM, want within 15s (SHUTDOWN_TIMEOUT)", r.Exited)
	}
	if r.ReadyStatus != http.StatusServiceUnavailable {
		tb.Errorf("/readyz in the second after the signal = %d, want 503", r.ReadyStatus)
	}
	if r.ReadyAfter > 500*time.Millisecond {
		tb.Errorf("/readyz answered 503 %v after the signal, want at once", r.ReadyAfter)
	}
	if !errors.Is(r.AfterDelay, syscall.ECONNREFUSED) {
		tb.Errorf("a new connection after SHUTDOWN_DELAY: %v, want connection refused", r.AfterDelay)
	}
	if r.InFlightHeld == 0 {
		tb.Errorf("no request was in flight when the service stopped accepting: the test proves nothing")
	}
	byStatus := map[int]int{}
	refused, failed := 0, 0
	for _, s := range r.Shots {
		switch {
		case s.Refused():
			refused++
		case s.Err != nil:
			if failed++; failed <= 5 {
				tb.Errorf("request sent %v after the signal: connection error %v", s.Start.Sub(r.Signalled), s.Err)
			}
		default:
			byStatus[s.Status]++
			if !slices.Contains(want, s.Status) {
				if failed++; failed <= 5 {
					tb.Errorf("request sent %v after the signal: %d %s, want one of %v", s.Start.Sub(r.Signalled), s.Status, s.Body, want)
				}
			}
		}
	}
	var last time.Time
	for _, s := range r.Shots {
		if s.End.After(last) {
			last = s.End
		}
	}
	tb.Logf("held %v after the signal; last answer %v after it", r.HeldAt.Sub(r.Signalled), last.Sub(r.Signalled))
	tb.Logf("%d requests: %v by status, %d refused (sent after it stopped accepting), %d failed; %d in flight at the drain; /readyz %d after %v",
		len(r.Shots), byStatus, refused, failed, r.InFlightHeld, r.ReadyStatus, r.ReadyAfter)
}

func send(client *http.Client, method, url string, body any) Shot {
	s := Shot{Start: time.Now()}
	s.Status, s.Body, s.Err = exchange(client, method, url, body)
	s.End = time.Now()
	return s
}

func exchange(client *http.Client, method, url string, body any) (int, string, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return 0, "", err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}
