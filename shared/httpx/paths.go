package httpx

import (
	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
)

// SetLocation sets a 201's Location to the new reservation's path (relative to
// the service that answered, where GET reads it).
func SetLocation(c *gin.Context, code, orderID string) {
	c.Header(api.HeaderLocation, api.ReservationPath(code, orderID))
}
