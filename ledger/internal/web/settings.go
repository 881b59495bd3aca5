package web

import (
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
)

// settings answers GET /internal/settings: the ledger settings a proxy's must
// agree with (a proxy refuses to start with a LEDGER_TIMEOUT at or above the
// HANGING_GRACE it reads here).
func (s *Server) settings(c *gin.Context) {
	c.JSON(http.StatusOK, api.NewLedgerSettings(s.HangingGrace))
}
