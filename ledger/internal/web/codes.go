package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// voucherCodes answers GET /internal/voucher-codes?after=: one page of every
// voucher's code, in code order. A proxy loads the whole set at start and
// answers a reserve for a code outside it 404 VOUCHER_NOT_FOUND itself, so
// that a flood of made-up codes never reaches this ledger or Postgres.
func (s *Server) voucherCodes(c *gin.Context) {
	q, err := queryParams(c, "after")
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	after := q["after"]
	if after != "" && !voucher.ValidCode(after) {
		httpx.WriteError(c, voucher.Errorf(voucher.CodeInvalidRequest, "after must match ^[A-Za-z0-9_-]{1,32}$"))
		return
	}
	codes, more, err := s.Store.VoucherCodes(c, after, api.VoucherCodesPage)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	page := api.VoucherCodes{Codes: codes}
	if more {
		page.Next = &codes[len(codes)-1]
	}
	c.JSON(http.StatusOK, page)
}
