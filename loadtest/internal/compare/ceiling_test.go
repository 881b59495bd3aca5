package compare

import (
	"net/http"
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// BenchmarkCeiling is the bare gin handler of compare's ceiling (bind and
// validate the reserve body, fixed 409) in process: the allocations and time
// the proxy's BenchmarkReserveSoldOut is compared with.
func BenchmarkCeiling(b *testing.B) {
	body := []byte(`{"customerId":3,"orderId":"bench-order-1","orderAmount":5000}`)
	httpxtest.BenchServe(b, ceilingHandler(), api.ReservationsPath("BENCH"), body, http.StatusConflict)
}
