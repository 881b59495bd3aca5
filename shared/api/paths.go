package api

import (
	"net/url"
	"strings"
)

// Path parameters, as the route patterns name them.
const (
	ParamCode    = "code"
	ParamOrderID = "orderId"
	ParamEventID = "id"
)

// Route patterns, in the httprouter syntax both services register them with
// (":name" is one path segment). Build a concrete path with Fill or the
// builders below, never by hand.
const (
	// Public reservation routes: the proxy serves them, the ledger too.
	RouteReservations = "/vouchers/:code/reservations"  // POST reserves
	RouteReservation  = RouteReservations + "/:orderId" // GET reads, DELETE releases
	RouteConfirm      = RouteReservation + "/confirm"   // POST confirms
	RouteRefund       = RouteReservation + "/refund"    // POST refunds

	// Admin routes (the ledger).
	RouteVouchers            = "/admin/vouchers"                         // POST creates, GET lists
	RouteVoucher             = RouteVouchers + "/:code"                  // GET reads, PATCH changes
	RoutePause               = RouteVoucher + "/pause"                   // POST
	RouteResume              = RouteVoucher + "/resume"                  // POST
	RouteWarmup              = RouteVoucher + "/warmup"                  // POST
	RouteReconcile           = RouteVoucher + "/reconcile"               // POST
	RouteVoucherReservations = RouteVoucher + "/reservations"            // GET pages the records
	RouteExport              = RouteVoucher + "/reservations.csv"        // GET
	RouteAudit               = RouteVoucher + "/audit"                   // GET
	RouteEvents              = "/admin/events"                           // GET pages the outbox
	RouteEventRetry          = RouteEvents + "/:id/retry"                // POST
	RouteFailedAdmissions    = "/admin/admissions/failed"                // GET lists the log's refused admissions
	RouteFailedAdmission     = RouteFailedAdmissions + "/:code/:orderId" // the base of the two below
	RouteAdmissionReplay     = RouteFailedAdmission + "/replay"          // POST admits it again
	RouteAdmissionDiscard    = RouteFailedAdmission + "/discard"         // POST closes it
	RouteAdmissionsLag       = "/admin/admissions/lag"                   // GET the consumer group's lag

	// InternalPrefix puts a route among the ledger's internal ones (what
	// proxies call).
	InternalPrefix = "/internal"
	// RouteAdmitted writes one claim the gate admitted.
	RouteAdmitted = InternalPrefix + RouteReservations
	// RouteAdmittedBatch writes what one coalesced round admitted: a
	// BatchRequest, answered with a BatchReply.
	RouteAdmittedBatch = RouteAdmitted + "/batch"
	// RouteUnsettled takes the orders of a voucher whose admission's fate the
	// proxy could not learn (a reserve script's reply lost, an admitted
	// write's answer lost): the ledger gives back their Redis uses once no
	// write of them can still commit, unless a row holds them. Body:
	// UnsettledBody.
	RouteUnsettled = InternalPrefix + "/vouchers/:code/unsettled"
	// SettingsPath tells a proxy the ledger settings its own must agree with
	// (LedgerSettings).
	SettingsPath = InternalPrefix + "/settings"
	// VoucherCodesPath pages the code of every voucher in code order
	// (VoucherCodes, up to VoucherCodesPage a page, after=the last code of
	// the page before): the set a proxy answers unknown codes from.
	VoucherCodesPath = InternalPrefix + "/voucher-codes"

	// Routes every service serves.
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
	MetricsPath = "/metrics"
	OpenAPIPath = "/openapi.yaml"
)

// OpenPaths are the routes that never require a token.
var OpenPaths = []string{HealthzPath, ReadyzPath, MetricsPath, OpenAPIPath}

// Fill builds a concrete path from a route pattern: each ":name" segment, in
// order, takes the next value, path-escaped. It panics when the count of values
// is not the count of parameters: that is a programming error, caught by any
// test that builds the path.
func Fill(pattern string, values ...string) string {
	var b strings.Builder
	b.Grow(len(pattern) + 16*len(values))
	rest, used := pattern, 0
	for {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			break
		}
		b.WriteString(rest[:i])
		end := strings.IndexByte(rest[i:], '/')
		if end < 0 {
			end = len(rest) - i
		}
		if used == len(values) {
			panic("api.Fill: too few values for " + pattern)
		}
		b.WriteString(url.PathEscape(values[used]))
		used++
		rest = rest[i+end:]
	}
	if used != len(values) {
		panic("api.Fill: too many values for " + pattern)
	}
	b.WriteString(rest)
	return b.String()
}

// ReservationsPath is RouteReservations of a voucher.
func ReservationsPath(code string) string { return Fill(RouteReservations, code) }

// ReservationPath is RouteReservation of one order.
func ReservationPath(code, orderID string) string { return Fill(RouteReservation, code, orderID) }

// VoucherPath is RouteVoucher of a voucher.
func VoucherPath(code string) string { return Fill(RouteVoucher, code) }
