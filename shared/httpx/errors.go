package httpx

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

var statusOf = map[string]int{
	voucher.CodeInvalidRequest:      http.StatusBadRequest,
	voucher.CodeUnauthorized:        http.StatusUnauthorized,
	voucher.CodeForbidden:           http.StatusForbidden,
	voucher.CodeVoucherExists:       http.StatusConflict,
	voucher.CodeVoucherNotFound:     http.StatusNotFound,
	voucher.CodeOutOfStock:          http.StatusConflict,
	voucher.CodeAlreadyUsed:         http.StatusConflict,
	voucher.CodeOrderConflict:       http.StatusConflict,
	voucher.CodeReservationReleased: http.StatusConflict,
	voucher.CodeNotEligible:         http.StatusUnprocessableEntity,
	voucher.CodeReservationExpired:  http.StatusConflict,
	voucher.CodeReservationNotFound: http.StatusNotFound,
	voucher.CodeAlreadyConfirmed:    http.StatusConflict,
	voucher.CodeNotConfirmed:        http.StatusConflict,
	voucher.CodeReservationRefunded: http.StatusConflict,
	voucher.CodeLimitBelowUsed:      http.StatusConflict,
	voucher.CodeWritePathLive:       http.StatusConflict,
	voucher.CodeNotFound:            http.StatusNotFound,
	voucher.CodeMethodNotAllowed:    http.StatusMethodNotAllowed,
	voucher.CodeUnavailable:         http.StatusServiceUnavailable,

	voucher.CodeCheckoutTokenRequired:     http.StatusForbidden,
	voucher.CodeCheckoutTokenInvalid:      http.StatusForbidden,
	voucher.CodeCheckoutTokenUnconfigured: http.StatusForbidden,
	voucher.CodeRateLimited:               http.StatusTooManyRequests,
}

// Status returns the HTTP status for an error code; unknown codes are 503, since
// a caller may always retry with the same orderId.
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusServiceUnavailable
}

// WriteError writes err as {"error", "message"[, "reason"]}. Errors without a
// voucher code are faults: they are answered 503 UNAVAILABLE, never with their
// internal text. Every 503 is logged, once, here (see AnswerError).
func WriteError(c *gin.Context, err error) {
	if e, ok := err.(*voucher.Error); ok {
		if raw, ok := encodedErrors[e]; ok {
			writeEncoded(c, Status(e.Code), raw)
			return
		}
	}
	status, body := AnswerError(c, err)
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		SetRetryAfter(c, 0)
	}
	c.AbortWithStatusJSON(status, body)
}

// encodedErrors are the bodies of the shared answers that are not faults
// (OUT_OF_STOCK, ALREADY_USED, PAUSED ...), encoded once: most answers of a
// flash sale are one of them. The bytes are what c.JSON would write.
var encodedErrors = encodeErrors(
	voucher.ErrNotStarted, voucher.ErrExpired, voucher.ErrOrderTooSmall, voucher.ErrPaused,
	voucher.ErrOutOfStock, voucher.ErrAlreadyUsed, voucher.ErrOrderConflict, voucher.ErrReservationReleased,
	voucher.ErrReservationExpired, voucher.ErrReservationNotFound, voucher.ErrAlreadyConfirmed,
	voucher.ErrNotConfirmed, voucher.ErrReservationRefunded, voucher.ErrLimitBelowUsed,
	voucher.ErrVoucherNotFound, voucher.ErrVoucherExists,
	voucher.ErrCheckoutTokenRequired, voucher.ErrCheckoutTokenInvalid, voucher.ErrCheckoutTokenUnconfigured,
)

func encodeErrors(errs ...*voucher.Error) map[*voucher.Error][]byte {
	m := make(map[*voucher.Error][]byte, len(errs))
	for _, e := range errs {
		if status, body := ErrorReply(e); status != http.StatusServiceUnavailable { // a 503 is logged: never here
			m[e], _ = json.Marshal(body) // strings only: it cannot fail
		}
	}
	return m
}

// jsonContentType is the Content-Type gin's c.JSON writes, shared by every
// pre-encoded answer (net/http only reads header values).
var jsonContentType = []string{"application/json; charset=utf-8"}

// writeEncoded is c.AbortWithStatusJSON with a body encoded beforehand.
func writeEncoded(c *gin.Context, status int, body []byte) {
	c.Abort()
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Writer.WriteHeader(status)
	_, _ = c.Writer.Write(body)
}

// AnswerError is ErrorReply for an answer about to be sent on c: a fault (any
// error answered 503) is logged with the request id, route, method and cause.
// It is the one place a fault is logged, so that a 503 leaves exactly one line;
// WriteError and the ledger's batch route (one answer per claim) call it.
func AnswerError(c *gin.Context, err error) (int, api.ErrorBody) {
	status, body := ErrorReply(err)
	if status == http.StatusServiceUnavailable {
		LoggerFrom(c).Error("request failed", "request_id", RequestIDFrom(c), "route", c.FullPath(),
			"method", c.Request.Method, "err", err)
	}
	return status, body
}

// ErrorReply is the status and body WriteError answers err with.
func ErrorReply(err error) (int, api.ErrorBody) {
	var e *voucher.Error
	if !errors.As(err, &e) {
		e = voucher.ErrUnavailable
	}
	return Status(e.Code), api.ErrorBody{Error: e.Code, Message: e.Message, Reason: e.Reason}
}

const loggerKey = "flashgate.logger"

// discard is the logger of an engine built without one.
var discard = slog.New(slog.DiscardHandler)

// Logger keeps log on every request, for LoggerFrom.
func Logger(log *slog.Logger) gin.HandlerFunc {
	if log == nil {
		log = discard
	}
	return func(c *gin.Context) { c.Set(loggerKey, log) }
}

// LoggerFrom returns the service's logger that the Logger middleware keeps on
// the request (NewEngine installs it), or one that discards when there is none.
func LoggerFrom(c *gin.Context) *slog.Logger {
	if log, ok := c.Value(loggerKey).(*slog.Logger); ok {
		return log
	}
	return discard
}
