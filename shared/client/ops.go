package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The ledger's outbox routes (a ledger token): the pull feed of events, the
// events a sink parked after its attempts, and their retry.

// Events reads the events after the id after (0: from the first), at most
// limit of them (1..500; 0: the service's default, 100).
func (c *Client) Events(ctx context.Context, after int64, limit int) (api.EventPage, error) {
	var out api.EventPage
	_, err := c.do(ctx, http.MethodGet, api.RouteEvents+eventQuery("", after, limit), nil, &out)
	return out, err
}

// FailedEvents reads the parked events after the id after: one item per
// (event, sink) that gave up on it.
func (c *Client) FailedEvents(ctx context.Context, after int64, limit int) (api.ParkedPage, error) {
	var out api.ParkedPage
	_, err := c.do(ctx, http.MethodGet, api.RouteEvents+eventQuery("failed", after, limit), nil, &out)
	return out, err
}

// RetryEvent asks every sink that parked the event to send it again (out of
// its voucher's order: receivers deduplicate by id) and returns those sinks'
// failures as they were. Errors: NOT_FOUND when no sink parked it.
func (c *Client) RetryEvent(ctx context.Context, id int64) ([]api.ParkedEvent, error) {
	var out api.Retrying
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteEventRetry, strconv.FormatInt(id, 10)), nil, &out)
	return out.Retrying, err
}

// StreamExport copies the voucher's reservations as CSV to w as the ledger
// streams them, in constant memory (ExportReservations holds the whole answer,
// up to 32 MiB). It is one attempt: once rows were written a retry would
// repeat them, so a 503 or no answer is returned (wrapping
// voucher.ErrUnavailable) for the caller to run again.
func (c *Client) StreamExport(ctx context.Context, code string, w io.Writer) (int64, error) {
	path := api.Fill(api.RouteExport, code)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, http.NoBody)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	if c.token != "" {
		req.Header.Set(api.HeaderAuthorization, api.Bearer(c.token))
	}
	req.Header.Set(api.HeaderRequestID, requestID(ctx))
	hr, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w: %w", path, err, voucher.ErrUnavailable)
	}
	defer hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(hr.Body, 64<<10))
		return 0, fmt.Errorf("GET %s: %w", path, decodeError(hr.StatusCode, raw))
	}
	dst := &watchedWriter{w: w}
	n, err := io.Copy(dst, hr.Body)
	switch {
	case dst.err != nil: // the caller's writer, not the ledger
		return n, fmt.Errorf("GET %s: write after %d bytes: %w", path, n, dst.err)
	case err != nil:
		return n, fmt.Errorf("GET %s: cut after %d bytes: %w: %w", path, n, err, voucher.ErrUnavailable)
	}
	return n, nil
}

// watchedWriter tells a failed write from a failed read in an io.Copy.
type watchedWriter struct {
	w   io.Writer
	err error
}

func (o *watchedWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

func eventQuery(status string, after int64, limit int) string {
	v := url.Values{}
	if status != "" {
		v.Set("status", status)
	}
	if after != 0 {
		v.Set("after", strconv.FormatInt(after, 10))
	}
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	return query(v)
}
