package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// emit writes v as indented JSON with -o json, else calls table with a
// tabwriter over stdout (flushed after it).
func (a *app) emit(v any, table func(w io.Writer)) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = cell(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// cell is how a table shows a value: times in UTC to the second, absent
// values as "-", raw JSON compact.
func cell(c any) string {
	switch v := c.(type) {
	case string:
		if v == "" {
			return "-"
		}
		return v
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.UTC().Format(time.RFC3339)
	case *time.Time:
		if v == nil {
			return "-"
		}
		return cell(*v)
	case *string:
		if v == nil {
			return "-"
		}
		return cell(*v)
	case *int64:
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	case bool:
		if v {
			return "yes"
		}
		return "no"
	case voucher.Duration:
		if v == 0 {
			return "-"
		}
		return time.Duration(v).String()
	case json.RawMessage:
		if len(v) == 0 || string(v) == "null" {
			return "-"
		}
		return string(v)
	}
	return fmt.Sprint(c)
}

// voucherRows writes vouchers as the list shows them.
func voucherRows(w io.Writer, vs []voucher.Voucher) {
	row(w, "CODE", "STATE", "FLASH", "DISCOUNT", "MIN-ORDER", "LIMIT", "PER-USER", "USED", "CONFIRMED", "REMAINING", "STARTS", "ENDS")
	for _, v := range vs {
		row(w, v.Code, v.State, v.FlashSale, v.DiscountAmount, v.MinOrderAmount, v.TotalLimit, v.PerUserLimit,
			v.UsedCount, v.ConfirmedCount, v.Remaining, v.StartsAt, v.EndsAt)
	}
}

// voucherFields writes one voucher, a field a line.
func voucherFields(w io.Writer, v voucher.Voucher) {
	for _, f := range []struct {
		name  string
		value any
	}{
		{"code", v.Code}, {"state", v.State}, {"paused", v.Paused}, {"flashSale", v.FlashSale},
		{"discountAmount", v.DiscountAmount}, {"minOrderAmount", v.MinOrderAmount},
		{"totalLimit", v.TotalLimit}, {"perUserLimit", v.PerUserLimit},
		{"startsAt", v.StartsAt}, {"endsAt", v.EndsAt},
		{"requireCheckoutToken", v.RequireCheckoutToken}, {"holdTtl", v.HoldTTL},
		{"usedCount", v.UsedCount}, {"reservedCount", v.ReservedCount}, {"confirmedCount", v.ConfirmedCount},
		{"refundedCount", v.RefundedCount}, {"remaining", v.Remaining},
	} {
		row(w, f.name, f.value)
	}
}
