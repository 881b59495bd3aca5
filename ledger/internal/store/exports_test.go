package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// What the external tests (package store_test, on a whole ledger from
// ledgertest) reach inside the store for; the store's own API leaves it out.
const (
	ActiveOfSQL    = activeOfSQL
	GroupCommitSQL = groupCommitSQL
	OrdersInSQL    = ordersInSQL
	TermsSQL       = termsSQL
)

// Translate is translate.
func Translate(err error) error { return translate(err) }

// GroupCommit is groupCommit.
func (s *Store) GroupCommit(ctx context.Context, q querier, v voucher.Voucher, claims []voucher.Claim) (map[string]groupRow, error) {
	return s.groupCommit(ctx, q, v, claims)
}

// Prime is prime.
func (s *Store) Prime(ctx context.Context, conn *pgx.Conn) error { return s.prime(ctx, conn) }
