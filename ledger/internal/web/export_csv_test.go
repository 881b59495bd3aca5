package web_test

import (
	"context"
	"encoding/csv"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
)

// exportRow is one reservation as the export's parsed cells and as the table
// has it: NULL is nil.
type exportRow struct {
	OrderID, Status            string
	CustomerID, DiscountAmount int64
	OrderAmount                *int64
	CreatedAt, ExpiresAt       time.Time
	ConfirmedAt, ReleasedAt    *time.Time
	ReleaseReason              *string
}

// parseExportRow parses one CSV row of the export (times RFC 3339, empty cell NULL).
func parseExportRow(tb testing.TB, cells []string) exportRow {
	tb.Helper()
	require.Len(tb, cells, 10)
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(tb, err, s)
		return n
	}
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(tb, err, s)
		require.Equal(tb, time.UTC, t.Location(), "times are UTC: %s", s)
		return t
	}
	r := exportRow{OrderID: cells[0], CustomerID: num(cells[1]), Status: cells[2], DiscountAmount: num(cells[4]),
		CreatedAt: at(cells[5]), ExpiresAt: at(cells[6])}
	if cells[3] != "" {
		n := num(cells[3])
		r.OrderAmount = &n
	}
	for i, dst := range []**time.Time{&r.ConfirmedAt, &r.ReleasedAt} {
		if s := cells[7+i]; s != "" {
			t := at(s)
			*dst = &t
		}
	}
	if reason := cells[9]; reason != "" {
		r.ReleaseReason = &reason
	}
	return r
}

// TestExportCSV exports 100,000 reservations (three made through the routes,
// the rest inserted in SQL with every kind of ending) and checks that the
// parsed rows equal the table, in creation order; that the rows are streamed
// (the query is still running on Postgres while the client has read only the
// first rows); and reports the time and the heap seen meanwhile.
func TestExportCSV(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-r1", 200_000).Status)
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-r2", 200_000).Status)
	require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations/"+code+"-r2/confirm", nil).Status)
	const n = 100_000
	l.Exec(t, `
		INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, created_at, expires_at,
		                                order_amount, discount_amount, confirmed_at, released_at, release_reason)
		SELECT $1::text, 10 + i % 5000, $1::text || ':o.' || i,
		       (ARRAY['RESERVED','CONFIRMED','RELEASED','RELEASED','REFUNDED'])[i % 5 + 1],
		       now() - make_interval(secs => i * 0.000123), now() + interval '15 minutes',
		       CASE WHEN i % 7 = 0 THEN NULL ELSE 1000 + i END, LEAST(1000 + i, 5000),
		       CASE WHEN i % 5 IN (1, 4) THEN now() END,
		       CASE WHEN i % 5 IN (2, 3, 4) THEN now() + make_interval(secs => i * 0.000001) END,
		       (ARRAY[NULL, NULL, 'CANCELLED', 'EXPIRED', 'REFUNDED'])[i % 5 + 1]
		FROM generate_series(1, $2::int - 2) i`, code, n)

	// The table is read first, so that the heap measured during the export
	// is the server's streaming and the client's row-by-row comparison.
	want := tableRows(t, l, code)
	require.Len(t, want, n)
	liveHeap := func() float64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc) / (1 << 20)
	}
	base := liveHeap()
	began := time.Now()
	req, err := http.NewRequest(http.MethodGet, l.URL+"/admin/vouchers/"+code+"/reservations.csv", nil)
	require.NoError(t, err)
	resp, err := ledgertest.HTTPClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/csv; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Empty(t, resp.Header.Get("Content-Length"), "streamed, not sized in advance")
	body := &countingReader{r: resp.Body}
	rd := csv.NewReader(body)
	rd.ReuseRecord = true
	header, err := rd.Read()
	require.NoError(t, err)
	assert.Equal(t, web.CSVHeader, header)
	assert.Equal(t, "order_id,customer_id,status,order_amount,discount_amount,created_at,expires_at,confirmed_at,released_at,release_reason",
		joinHeader(header))

	read := 0
	next := func() bool {
		cells, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return false
		}
		require.NoError(t, err)
		require.Less(t, read, len(want), "more rows than the table")
		if got := parseExportRow(t, cells); !assert.Equal(t, want[read], got, "row %d", read) {
			t.FailNow()
		}
		read++
		return true
	}
	for read < 10 {
		require.True(t, next())
	}
	// The client has read 10 rows of 100,000: a server that collected them
	// first would have finished its query by now.
	time.Sleep(300 * time.Millisecond)
	var running int
	require.NoError(t, l.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE state = 'active' AND query LIKE '%reservations export%' AND query NOT LIKE '%pg_stat_activity%'`).Scan(&running))
	assert.Equal(t, 1, running, "the export's query still runs while the client reads its first rows")
	for read < 10_000 {
		require.True(t, next())
	}
	early := liveHeap()
	for read < 90_000 {
		require.True(t, next())
	}
	late := liveHeap()
	for next() {
	}
	took := time.Since(began)
	// The heap is the whole test process's, other tests running in parallel
	// included, so it is reported, not asserted: that the export streams is
	// asserted above (its query still runs while the client reads its first
	// rows); a server that buffered the rows would have finished it.
	assert.Equal(t, n, read, "every row of the table, in id order")
	t.Logf("exported %d rows (%.1f MiB of CSV) in %s; live heap after GC (client and server in this process, "+
		"the table's rows held by the test): %.1f MiB before, %.1f MiB at row 10,000, %.1f MiB at row 90,000",
		read, float64(body.n)/(1<<20), took.Round(time.Millisecond), base, early, late)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func joinHeader(h []string) string {
	s := ""
	for i, c := range h {
		if i > 0 {
			s += ","
		}
		s += c
	}
	return s
}

// tableRows reads a voucher's reservations straight from the table, in id order.
func tableRows(tb testing.TB, l *ledgertest.Ledger, code string) []exportRow {
	tb.Helper()
	rows, err := l.Pool.Query(context.Background(), `
		SELECT order_id, customer_id, status, order_amount, discount_amount, created_at, expires_at,
		       confirmed_at, released_at, release_reason
		FROM voucher_redemption WHERE voucher_code = $1 ORDER BY id`, code)
	require.NoError(tb, err)
	defer rows.Close()
	var out []exportRow
	for rows.Next() {
		var r exportRow
		require.NoError(tb, rows.Scan(&r.OrderID, &r.CustomerID, &r.Status, &r.OrderAmount, &r.DiscountAmount,
			&r.CreatedAt, &r.ExpiresAt, &r.ConfirmedAt, &r.ReleasedAt, &r.ReleaseReason))
		r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
		for _, p := range []*time.Time{r.ConfirmedAt, r.ReleasedAt} {
			if p != nil {
				*p = p.UTC()
			}
		}
		out = append(out, r)
	}
	require.NoError(tb, rows.Err())
	return out
}

// TestExportEmptyAndUnknown checks the export of a voucher without
// reservations (the header alone) and of an unknown voucher (404).
func TestExportEmptyAndUnknown(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"/reservations.csv", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, joinHeader(web.CSVHeader)+"\n", r.Raw)
	r = l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"x/reservations.csv", nil)
	assert.Equal(t, http.StatusNotFound, r.Status, r.Raw)
	assert.Equal(t, "VOUCHER_NOT_FOUND", r.Code())
}

// TestExportCSVFormulaCells: orderIds a spreadsheet would evaluate are
// exported with a leading ' (OWASP's CSV injection rule). -1-1 and -2.5E3 are
// valid orderIds and go through; +1, @x and =1+1 are refused by the reserve
// route's validation, so they never reach a row, let alone the export.
func TestExportCSVFormulaCells(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	for i, order := range []string{"-1-1", "-2.5E3"} {
		r := l.Reserve(t, code, int64(i+1), order+code, 200_000)
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	}
	for i, order := range []string{"+1", "@x", "=1+1"} {
		r := l.Reserve(t, code, int64(i+10), order+code, 200_000)
		assert.Equal(t, http.StatusBadRequest, r.Status, "reserve %q: %s", order, r.Raw)
	}
	r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"/reservations.csv", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	rows, err := csv.NewReader(strings.NewReader(r.Raw)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3, r.Raw)
	got := []string{rows[1][0], rows[2][0]}
	assert.ElementsMatch(t, []string{"'-1-1" + code, "'-2.5E3" + code}, got, r.Raw)
}
