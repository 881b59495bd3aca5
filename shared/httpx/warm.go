package httpx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// warmTimeout bounds one warm-up request.
const warmTimeout = 5 * time.Second

// WarmUp is a service's start-up warm-up (the proxy's WARM_REQUESTS): before
// it listens, the service sends itself Requests POSTs to Path, Conns at a time over as
// many kept-alive loopback connections, on a listener of its own serving a
// copy of its routes (with metrics of their own, so that the warm-up shows in
// neither the service's metrics nor its log). Body must be refused by the
// route's validation with Want (400): the warm-up then reads and writes
// nothing anywhere, and a request answered otherwise fails it.
//
// Why: a new process served the first thousand requests of a burst two to
// three times slower than the same process a second later (its heap, its
// goroutines' stacks and its pools grow to the burst's concurrency as the
// burst arrives), and a sale's first second is those requests
// (loadtest/BENCHMARKS.md).
type WarmUp struct {
	Path     string
	Body     []byte
	Token    string // sent as a bearer token when not empty
	Want     int
	Requests int
	Conns    int
}

// Serve runs the warm-up against h and returns how many requests were
// answered Want.
func (w WarmUp) Serve(ctx context.Context, h http.Handler) (int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("warm-up listener: %w", err)
	}
	srv := NewServer(ln.Addr().String(), h)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: w.Conns, MaxConnsPerHost: w.Conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: warmTimeout}
	url := "http://" + ln.Addr().String() + w.Path
	var sent, answered atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range max(w.Conns, 1) {
		g.Go(func() error {
			for sent.Add(1) <= int64(w.Requests) {
				if err := w.send(ctx, client, url); err != nil {
					return err
				}
				answered.Add(1)
			}
			return nil
		})
	}
	err = g.Wait()
	return answered.Load(), err
}

func (w WarmUp) send(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(w.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if w.Token != "" {
		req.Header.Set("Authorization", "Bearer "+w.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != w.Want {
		return fmt.Errorf("warm-up request to %s answered %d, want %d", w.Path, resp.StatusCode, w.Want)
	}
	return nil
}

// Run runs the warm-up when it has requests to send and logs its outcome: one
// "serving warm" line, or a warning when it failed (the service then starts
// cold; a failed warm-up is never fatal). A warm-up that a shutdown cut
// short is no fault: it says so at INFO.
func (w WarmUp) Run(ctx context.Context, h http.Handler, log *slog.Logger) {
	if w.Requests <= 0 {
		return
	}
	start := time.Now()
	n, err := w.Serve(ctx, h)
	if err != nil && ctx.Err() != nil {
		log.Info("serving warm-up cut short: stopping", "answered", n)
		return
	}
	if err != nil {
		log.Warn("serving warm-up failed: starting cold", "answered", n, "err", err)
		return
	}
	log.Info("serving warm", "requests", n, "conns", w.Conns, "took", time.Since(start).String())
}
