package attack

import (
	"bytes"
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// formulaOrderIDs are orderIds a spreadsheet would evaluate or mangle: each
// begins with one of OWASP's formula characters.
var formulaOrderIDs = []string{"-1-1", "-2.5E3", "+1", "@x", "=1+1"}

// runCSV reserves each of formulaOrderIDs on a standard voucher through the
// ledger and exports the voucher's reservations: each id must be refused
// (4xx) or exported with a leading "'".
func runCSV(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	spec := verify.VoucherSpec{Code: verify.NewCode("csv"), Stock: 100, PerUser: 1}
	if err := r.bench.CreateVoucher(ctx, spec); err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	// order_id is UNIQUE over every voucher: the ids are free because the
	// scenario's stack has a database of its own.
	answers := map[string]answer{}
	for i, id := range formulaOrderIDs {
		a, err := call(ctx, client, http.MethodPost, r.st.LedgerURL+api.ReservationsPath(spec.Code), adminToken, reserveBody(id, int64(i+1)))
		if err != nil {
			return nil, err
		}
		answers[id] = a
	}
	export, err := call(ctx, client, http.MethodGet, r.st.LedgerURL+api.Fill(api.RouteExport, spec.Code), adminToken, nil)
	if err != nil {
		return nil, err
	}
	return judgeCSV(answers, export), nil
}

// judgeCSV finds each orderId in the export: refused, prefixed, or raw.
func judgeCSV(answers map[string]answer, export answer) *Result {
	res := &Result{Scenario: "csv"}
	cells := map[string]bool{}
	rows, err := csv.NewReader(bytes.NewReader(export.Body)).ReadAll()
	for _, row := range rows {
		if len(row) > 0 {
			cells[row[0]] = true
		}
	}
	res.figure("export: %s, %d rows", export, len(rows))
	if export.Status != http.StatusOK || err != nil {
		res.want("the export is a CSV", false, "%s: %v", export, err)
	}
	for _, id := range formulaOrderIDs {
		a := answers[id]
		name := "orderId " + id + " is refused or exported with a leading '"
		switch {
		case a.Status >= 400 && a.Status < 500:
			res.want(name, true, "refused at reserve: %s", a)
		case a.Status != http.StatusCreated:
			res.want(name, false, "reserve answered %s", a)
		case cells["'"+id]:
			res.want(name, true, "reserved (%s), exported as %q", a, "'"+id)
		case cells[id]:
			res.want(name, false, "reserved (%s), exported raw as %q", a, id)
		default:
			res.want(name, false, "reserved (%s), not in the export's order_id column (%s)", a, strings.Join(keys(cells), " "))
		}
	}
	return res.finish()
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
