package web

import (
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// queryParams returns the request's query parameters, refusing any not named
// in allowed and any given twice: a filter misspelled must not list everything.
func queryParams(c *gin.Context, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(c.Request.URL.RawQuery)
	if err != nil {
		return nil, voucher.Errorf(voucher.CodeInvalidRequest, "malformed query string")
	}
	out := make(map[string]string, len(q))
	for name, values := range q {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known:
			return nil, voucher.Errorf(voucher.CodeInvalidRequest, "unknown query parameter %q", name)
		case len(values) != 1:
			return nil, voucher.Errorf(voucher.CodeInvalidRequest, "query parameter %s given %d times", name, len(values))
		}
		out[name] = values[0]
	}
	return out, nil
}

// listQuery starts every admin listing: its query (the parameters in allowed
// and limit, each at most once) and its page size (pageLimit). It answers a
// bad one 400 itself and returns false.
func listQuery(c *gin.Context, allowed ...string) (map[string]string, int, bool) {
	q, err := queryParams(c, append(allowed, "limit")...)
	if err != nil {
		httpx.WriteError(c, err)
		return nil, 0, false
	}
	limit, err := pageLimit(q)
	if err != nil {
		httpx.WriteError(c, err)
		return nil, 0, false
	}
	return q, limit, true
}

// nextAfter is a feed page's nextAfter: the id of its last item, or after (the
// one asked) when the page is empty, so that the caller polls from there.
func nextAfter[T any](page []T, after int64, id func(T) int64) int64 {
	if len(page) == 0 {
		return after
	}
	return id(page[len(page)-1])
}

// pageLimit reads limit: 1..maxPageSize, defaultPageSize when absent.
func pageLimit(q map[string]string) (int, error) {
	s, ok := q["limit"]
	if !ok {
		return defaultPageSize, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxPageSize || strconv.Itoa(n) != s {
		return 0, voucher.Errorf(voucher.CodeInvalidRequest, "limit must be an integer from 1 to %d", maxPageSize)
	}
	return n, nil
}

// voucherFilter reads GET /admin/vouchers' query (listQuery's).
func voucherFilter(q map[string]string, limit int) (store.VoucherFilter, error) {
	f := store.VoucherFilter{Limit: limit}
	var err error
	if s, ok := q["state"]; ok {
		if !voucher.ValidState(s) {
			return store.VoucherFilter{}, voucher.Errorf(voucher.CodeInvalidRequest, "state must be scheduled, live, paused or ended")
		}
		f.State = s
	}
	if s, ok := q["flashSale"]; ok {
		if s != "true" && s != "false" {
			return store.VoucherFilter{}, voucher.Errorf(voucher.CodeInvalidRequest, "flashSale must be true or false")
		}
		flash := s == "true"
		f.FlashSale = &flash
	}
	if s, ok := q["cursor"]; ok {
		if f.After, err = decodeCodeCursor(s); err != nil {
			return store.VoucherFilter{}, err
		}
	}
	return f, nil
}

// recordFilter reads GET /admin/vouchers/{code}/reservations' query
// (listQuery's).
func recordFilter(q map[string]string, limit int) (store.RecordFilter, error) {
	f := store.RecordFilter{Limit: limit}
	var err error
	if s, ok := q["status"]; ok {
		if f.Status = voucher.Status(s); !voucher.ValidStatus(f.Status) {
			return store.RecordFilter{}, voucher.Errorf(voucher.CodeInvalidRequest, "status must be RESERVED, CONFIRMED, RELEASED or REFUNDED")
		}
	}
	if s, ok := q["customerId"]; ok {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
			return store.RecordFilter{}, voucher.Errorf(voucher.CodeInvalidRequest, "customerId must be a positive integer")
		}
		f.CustomerID = id
	}
	if s, ok := q["cursor"]; ok {
		if f.After, err = decodeIDCursor(s); err != nil {
			return store.RecordFilter{}, err
		}
	}
	return f, nil
}
