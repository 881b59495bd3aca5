package web

import (
	"context"
	"encoding/csv"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// csvHeader is the first row of GET /admin/vouchers/{code}/reservations.csv.
var csvHeader = []string{"order_id", "customer_id", "status", "order_amount", "discount_amount",
	"created_at", "expires_at", "confirmed_at", "released_at", "release_reason"}

// Export tuning: rows between flushes, and how long one flush may wait for a
// slow reader (the server's WriteTimeout would end a long export), never past
// the export's own deadline.
const (
	exportFlushRows    = 500
	exportWriteTimeout = 30 * time.Second
)

// errTooManyExports refuses an export over EXPORT_MAX: each holds a
// connection of the exports' pool and a snapshot for as long as it streams.
var errTooManyExports = voucher.Errorf(voucher.CodeRateLimited,
	"too many exports at once (EXPORT_MAX); retry after Retry-After")

// exportBudget is what the exports may take together: slots (EXPORT_MAX, nil:
// no bound) and the deadline of each (EXPORT_TIMEOUT, 0: none).
type exportBudget struct {
	slots   chan struct{}
	timeout time.Duration
}

func newExportBudget(most int, timeout time.Duration) exportBudget {
	b := exportBudget{timeout: timeout}
	if most > 0 {
		b.slots = make(chan struct{}, most)
	}
	return b
}

// start takes a slot without waiting (errTooManyExports when none is free:
// a crowd of exports must not queue on the ledger) and gives c's request the
// export's deadline; done gives both back.
func (b exportBudget) start(c *gin.Context) (done func(), err error) {
	if b.slots != nil {
		select {
		case b.slots <- struct{}{}:
		default:
			return nil, errTooManyExports
		}
	}
	cancel := func() {}
	if b.timeout > 0 {
		var ctx context.Context
		ctx, cancel = context.WithTimeout(c.Request.Context(), b.timeout)
		c.Request = c.Request.WithContext(ctx)
	}
	return func() {
		cancel()
		if b.slots != nil {
			<-b.slots
		}
	}, nil
}

// writeDeadline is how long one write of the export may wait for its reader:
// exportWriteTimeout, never past the export's deadline.
func writeDeadline(c *gin.Context) time.Time {
	at := time.Now().Add(exportWriteTimeout)
	if d, ok := c.Request.Context().Deadline(); ok && d.Before(at) {
		return d
	}
	return at
}

// csvRow is a reservation as a row of the export: times in RFC 3339 with
// nanoseconds in UTC (as the JSON answers have them), an empty cell for NULL.
func csvRow(r voucher.Record) []string {
	opt := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return csvTime(*t)
	}
	amount, reason := "", ""
	if r.OrderAmount != nil {
		amount = strconv.FormatInt(*r.OrderAmount, 10)
	}
	if r.ReleaseReason != nil {
		reason = *r.ReleaseReason
	}
	row := []string{r.OrderID, strconv.FormatInt(r.CustomerID, 10), string(r.Status), amount,
		strconv.FormatInt(r.DiscountAmount, 10), csvTime(r.CreatedAt), csvTime(r.ExpiresAt),
		opt(r.ConfirmedAt), opt(r.ReleasedAt), reason}
	for i, cell := range row {
		row[i] = csvCell(cell)
	}
	return row
}

// csvCell defuses a cell a spreadsheet would read as a formula (OWASP's CSV
// injection rule): one that begins with =, +, -, @, a tab or a carriage
// return gets a leading '. An orderId such as -1-1 or -2.5E3 is valid, and
// a spreadsheet opening the export would evaluate it or turn it into a number.
func csvCell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}

func csvTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// writeExport streams a voucher's reservations as CSV. Errors before the first
// byte are answered as usual (404, 503); a failure after it cannot change the
// status any more, so the connection is closed mid-body: the client sees a
// broken transfer, never a short file that looks whole.
func writeExport(c *gin.Context, st *store.Store, code string, log *slog.Logger) {
	rc := http.NewResponseController(c.Writer)
	w := csv.NewWriter(c.Writer)
	started, n := false, 0
	start := func() error {
		started = true
		_ = rc.SetWriteDeadline(writeDeadline(c))
		c.Header("Content-Type", "text/csv; charset=utf-8")
		c.Header("Content-Disposition", `attachment; filename="`+code+`-reservations.csv"`)
		c.Status(http.StatusOK)
		return w.Write(csvHeader)
	}
	flush := func() error {
		_ = rc.SetWriteDeadline(writeDeadline(c))
		w.Flush()
		if err := w.Error(); err != nil {
			return err
		}
		return rc.Flush()
	}
	err := st.EachRecord(c, code, func(r voucher.Record) error {
		if !started {
			if err := start(); err != nil {
				return err
			}
		}
		if err := w.Write(csvRow(r)); err != nil {
			return err
		}
		if n++; n%exportFlushRows == 0 {
			return flush()
		}
		return nil
	})
	if err == nil && !started {
		err = start()
	}
	if err == nil {
		err = flush()
	}
	switch {
	case err == nil:
	case !started:
		httpx.WriteError(c, err)
	default:
		if log != nil {
			log.Error("export broken off", "code", code, "rows", n, "request_id", httpx.RequestIDFrom(c), "err", err)
		}
		if conn, _, herr := rc.Hijack(); herr == nil {
			conn.Close()
		}
	}
}
