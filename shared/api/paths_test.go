package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFill(t *testing.T) {
	assert.Equal(t, "/vouchers/FLASH/reservations", ReservationsPath("FLASH"))
	assert.Equal(t, "/vouchers/A%2FB/reservations/o%201", ReservationPath("A/B", "o 1"))
	assert.Equal(t, "/vouchers/C/reservations/o/confirm", Fill(RouteConfirm, "C", "o"))
	assert.Equal(t, "/admin/vouchers/C/reservations.csv", Fill(RouteExport, "C"))
	assert.Equal(t, "/admin/events/42/retry", Fill(RouteEventRetry, "42"))
	assert.Equal(t, "/internal/vouchers/C/reservations/batch", Fill(RouteAdmittedBatch, "C"))
	assert.Equal(t, "/admin/vouchers", Fill(RouteVouchers))
	assert.Panics(t, func() { Fill(RouteReservation, "C") })
	assert.Panics(t, func() { Fill(RouteVoucher, "C", "x") })
}
