package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// prober probes the system from the fault until it sees it answer
// probesInARow in a row after the fault ended, or until bound after the
// fault ended. Every probe is a new order of a new customer, so every
// answered probe should be a 201.
type prober struct {
	url, code string
	bound     time.Duration
	client    *http.Client
	replays   atomic.Int64
	end       atomic.Int64 // when the fault ended (UnixNano); 0 while it lasts
	done      chan struct{}

	plan  load.Plan   // owned by run until done
	shots []load.Shot // in send order
}

func newProber(proxyURL, code string, bound time.Duration) *prober {
	p := &prober{url: load.ReserveURL(proxyURL, code), code: code, bound: bound, done: make(chan struct{})}
	p.client = &http.Client{Timeout: probeTimeout, Transport: load.TagTransport{Base: &http.Transport{}, Replays: &p.replays}}
	return p
}

func (p *prober) faultEnded(t time.Time) { p.end.Store(t.UnixNano()) }

// wait returns the probes once run has finished.
func (p *prober) wait() []load.Shot {
	<-p.done
	return p.shots
}

func (p *prober) run(ctx context.Context) {
	defer close(p.done)
	defer p.client.CloseIdleConnections()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		if e := p.end.Load(); e != 0 {
			end := time.Unix(0, e)
			if _, ok := recoveredAt(p.shots, end, probesInARow); ok || time.Since(end) > p.bound {
				return
			}
		}
		p.shoot(ctx, i)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

func (p *prober) shoot(ctx context.Context, i int) {
	o := load.Order{ID: fmt.Sprintf("%s-p%d", p.code, i), Customer: int64(i + 1)}
	p.plan.Orders = append(p.plan.Orders, o)
	p.plan.Requests = append(p.plan.Requests, int32(i))
	s, _ := load.PostReserve(ctx, p.client, p.url, o)
	s.Seq, s.Req = uint64(i), int32(i)
	p.shots = append(p.shots, s)
}

// recoveredAt returns when the first of k answered probes in a row, all sent
// at or after end, came back. An answer is anything but "no answer" and 5xx
// (see Shot.Failed): a refusal is an answer, which the invariants judge.
func recoveredAt(shots []load.Shot, end time.Time, k int) (time.Time, bool) {
	run := 0
	var first time.Time
	for _, s := range shots {
		if s.At.Before(end) {
			continue
		}
		if s.Failed() {
			run = 0
			continue
		}
		if run == 0 {
			first = s.At.Add(s.Latency)
		}
		if run++; run == k {
			return first, true
		}
	}
	return time.Time{}, false
}
