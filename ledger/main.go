// Command ledger owns flashgate's Postgres: it writes admitted reservations,
// confirms and releases them, expires abandoned ones, keeps Redis in step with
// the database and reloads Redis after it lost its data.
package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/app"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
)

// writeMargin is what writeTimeoutFor keeps between the longest time a write
// can still commit and HANGING_GRACE.
const writeMargin = 100 * time.Millisecond

// writeTimeoutFor bounds one group commit (and so an admitted write in flight
// when the ledger stops accepting): WRITE_TIMEOUT, but never so long that the
// write could still commit once HANGING_GRACE has passed. A write's last
// statement may run on the server up to DB_TIMEOUT past the writer's own
// deadline (its session's statement_timeout), and the reconciler frees a
// Redis hold with no row once it is older than the grace: a grace shorter
// than the write's life would free a use whose row then commits.
func writeTimeoutFor(set, grace, dbTimeout time.Duration) time.Duration {
	return max(min(set, grace-dbTimeout-writeMargin), writeMargin)
}

// minHangingGrace is HANGING_GRACE's floor: an admission younger than the
// grace may still be on its way to the database, and a grace shorter than a
// second would let the reconciler free holds whose writes are still in flight.
// Tests run the jobs fast with a grace of 1 to 2 s.
const minHangingGrace = time.Second

// doc heads the ledger's --help.
const doc = `ledger owns flashgate's Postgres: it writes admitted reservations, confirms and
releases them, expires abandoned ones and keeps Redis in step with the database.`

// configFrom reads the Config from e (the environment, or a map in tests);
// each read's last argument is the setting's line in --help.
func configFrom(e *envconf.Reader) (app.Config, error) {
	c := app.Config{
		Addr:        e.Addr("LEDGER_ADDR", "127.0.0.1:8081", "listen address"),
		DatabaseURL: e.String("DATABASE_URL", "", "required: Postgres; the ledger applies its migrations at start"),
		RedisURL: e.String("REDIS_URL", "",
			"Redis for flash vouchers, in the proxy's form; unset: flash vouchers answer 503"),
		Token: e.String("LEDGER_TOKEN", "",
			"bearer token (actor default) with every scope; LEDGER_TOKEN or LEDGER_TOKENS is required unless LEDGER_AUTH=off"),
		Tokens: e.Tokens("LEDGER_TOKENS", auth.Scopes,
			"more bearer tokens with the actor names the audit trail records and, optionally, their scopes: name:token[:scope+scope...],...; a token without a scope list has every scope; a proxy's needs only internal"),
		OpenAdmin: !e.Switch("LEDGER_AUTH", true,
			"off: every route is open without a token (logged at WARN at start); on: LEDGER_TOKEN or LEDGER_TOKENS is required, the ledger refuses to start without one"),
		ReservationTTL: e.Duration("RESERVATION_TTL", 15*time.Minute,
			"how long a reservation holds its use before the sweeper releases it"),
		ExpiryInterval:    e.Duration("EXPIRY_INTERVAL", time.Minute, "how often the expiry sweeper runs"),
		ReconcileInterval: e.Duration("RECONCILE_INTERVAL", time.Minute, "how often live flash vouchers are reconciled"),
		HangingGrace: e.DurationMin("HANGING_GRACE", 30*time.Second, minHangingGrace,
			"a Redis admission with no database row is freed only after this long"),
		MaxConns: e.Int("DB_MAX_CONNS", 32, 2, "Postgres pool size"),
		MinConns: e.Int("DB_MIN_CONNS", 4, 0,
			"Postgres connections opened at start, primed with the hot statements and kept open, so that the first requests of a sale find them (at most DB_MAX_CONNS)"),
		RedisWarm:  e.Int("REDIS_WARM_CONNS", 4, 0, "Redis connections opened as the service starts, with every gate script loaded"),
		WriteBatch: e.Int("WRITE_MAX_BATCH", 256, 1, "most admitted reservations written in one transaction"),
		MaxPerVoucher: e.Int("MAX_INFLIGHT_PER_VOUCHER", 16, 1,
			"most reserves of one standard voucher worked on at once"),
		VoucherWait: e.Duration("VOUCHER_WAIT", 500*time.Millisecond,
			"longest wait for a standard voucher's slot (below 1s)"),
		DBTimeout: e.Duration("DB_TIMEOUT", 500*time.Millisecond,
			"deadline of each Postgres statement and pool wait (below 2s), on the ledger's side and on the server's (statement_timeout)"),
		WriteTimeout: e.Duration("WRITE_TIMEOUT", 10*time.Second,
			"deadline of one group commit of admitted writes; capped at HANGING_GRACE minus DB_TIMEOUT and 100ms, so that no hold is freed while its write could still commit"),
		ExportMax: e.Int("EXPORT_MAX", 2, 1,
			"most CSV exports streaming at once, each on a connection of their own pool (beside DB_MAX_CONNS); one more is 429 RATE_LIMITED with Retry-After"),
		ExportTimeout: e.Duration("EXPORT_TIMEOUT", time.Minute,
			"deadline of one CSV export, however slowly its client reads: its transaction, and the snapshot that holds back vacuum, ends by then (statement_timeout and idle_in_transaction_session_timeout on its sessions too); the client then sees a broken transfer"),
		Serving: httpx.ReadServing(e),
	}
	if err := e.Err(); err != nil {
		return c, err
	}
	var err error
	if c.Events, err = outbox.ReadConfig(e); err != nil {
		return c, err
	}
	if c.Admissions, err = admissions.ReadConfig(e, c.Events.Brokers); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, errors.New("DATABASE_URL is required")
	}
	if err := store.CheckURL(c.DatabaseURL); err != nil {
		return c, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if c.RedisURL != "" {
		if err := gate.CheckURL(c.RedisURL); err != nil {
			return c, err
		}
	}
	if c.MinConns > c.MaxConns {
		return c, fmt.Errorf("DB_MIN_CONNS (%d) must be at most DB_MAX_CONNS (%d)", c.MinConns, c.MaxConns)
	}
	if err := sale.CheckVoucherWait(c.VoucherWait); err != nil {
		return c, err
	}
	if err := store.CheckDBTimeout(c.DBTimeout); err != nil {
		return c, err
	}
	if c.HangingGrace <= c.DBTimeout+2*writeMargin {
		return c, fmt.Errorf("HANGING_GRACE (%v) must be above DB_TIMEOUT (%v) plus 200ms: a hold would be freed while its write could still commit",
			c.HangingGrace, c.DBTimeout)
	}
	if err := httpx.CheckLoopback("DEBUG_ADDR", c.DebugAddr); err != nil {
		return c, err
	}
	c.WriteTimeout = writeTimeoutFor(c.WriteTimeout, c.HangingGrace, c.DBTimeout)
	if err := c.Shutdown.Check(c.WriteTimeout, "the group commit's deadline (WRITE_TIMEOUT)"); err != nil {
		return c, err
	}
	return c, checkLedgerAuth(c)
}

// checkLedgerAuth refuses a ledger without a token unless LEDGER_AUTH=off
// says so, LEDGER_AUTH=off beside a token (which of the two was meant?), and
// LEDGER_TOKENS that make an actor ambiguous: the ledger fails closed, as the
// proxy does.
func checkLedgerAuth(c app.Config) error {
	hasToken := c.Token != "" || len(c.Tokens) > 0
	switch {
	case !hasToken && !c.OpenAdmin:
		return errors.New("LEDGER_TOKEN or LEDGER_TOKENS is required: without a token anyone who reaches the ledger can create, change, list or export vouchers and write admitted reservations; LEDGER_AUTH=off opens the ledger on purpose")
	case hasToken && c.OpenAdmin:
		return errors.New("LEDGER_AUTH=off and LEDGER_TOKEN or LEDGER_TOKENS are both set: unset one")
	}
	return auth.CheckTokens("LEDGER_TOKEN", c.Token, "LEDGER_TOKENS", c.Tokens)
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	envconf.Main("ledger", doc, configFrom, app.Run)
}
