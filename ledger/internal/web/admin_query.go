package web

import (
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/store"
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

// voucherFilter reads GET /admin/vouchers' query.
func voucherFilter(c *gin.Context) (store.VoucherFilter, error) {
	q, err := queryParams(c, "state", "flashSale", "limit", "cursor")
	if err != nil {
		return store.VoucherFilter{}, err
	}
	var f store.VoucherFilter
	if f.Limit, err = pageLimit(q); err != nil {
		return store.VoucherFilter{}, err
	}
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

// recordFilter reads GET /admin/vouchers/{code}/reservations' query.
func recordFilter(c *gin.Context) (store.RecordFilter, error) {
	q, err := queryParams(c, "status", "customerId", "limit", "cursor")
	if err != nil {
		return store.RecordFilter{}, err
	}
	var f store.RecordFilter
	if f.Limit, err = pageLimit(q); err != nil {
		return store.RecordFilter{}, err
	}
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
