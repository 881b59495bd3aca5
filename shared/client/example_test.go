package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

// A checkout service reserves a voucher's use for an order, retries safely,
// tells a sold-out voucher from a customer who already used it, and confirms
// when the payment arrives. (stack is the ledger and proxy this package's
// TestMain started; in production the URLs are the proxy's and the ledger's.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An operator creates the voucher on the ledger: one use in all.
	admin := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	code, start := "EXAMPLE1", time.Now().Add(-time.Minute)
	end := start.Add(time.Hour)
	discount, total, flash := int64(5_000), 1, true
	if _, err := admin.CreateVoucher(ctx, voucher.NewVoucher{Code: &code, DiscountAmount: &discount,
		TotalLimit: &total, StartsAt: &start, EndsAt: &end, FlashSale: &flash}); err != nil {
		fmt.Println("create:", err)
		return
	}

	// The checkout reserves through the proxy; a 503 would be retried with the
	// same orderId until ctx's deadline.
	shop := client.New(stack.ProxyURL, client.WithToken(proxyToken))
	order := voucher.Claim{CustomerID: 42, OrderID: "order-1001", OrderAmount: 75_000}
	r, err := shop.Reserve(ctx, code, order)
	fmt.Println(r.DiscountAmount, r.Replayed, r.Location, err)

	// The same order again (a retry after a lost answer) is replayed, never a second use.
	r, _ = shop.Reserve(ctx, code, order)
	fmt.Println("replayed:", r.Replayed)

	// Another order finds no use left: switch on the code.
	_, err = shop.Reserve(ctx, code, voucher.Claim{CustomerID: 7, OrderID: "order-1002", OrderAmount: 75_000})
	switch voucher.ErrorCode(err) {
	case voucher.CodeOutOfStock:
		fmt.Println("sold out")
	case voucher.CodeAlreadyUsed:
		fmt.Println("this customer already used it")
	default:
		fmt.Println("other:", err)
	}

	// The payment callback confirms.
	c, err := shop.Confirm(ctx, code, order.OrderID)
	fmt.Println(c.Status, c.DiscountAmount, err)
	// Output:
	// 5000 false /vouchers/EXAMPLE1/reservations/order-1001 <nil>
	// replayed: true
	// sold out
	// CONFIRMED 5000 <nil>
}
