-- Defending a sale against its crowd: a voucher may require a signed checkout
-- token on reserve (the proxy checks it before the Redis gate), and may hold
-- its unpaid reservations for less (or more) than the ledger's
-- RESERVATION_TTL. Additive: existing vouchers require no token and keep
-- RESERVATION_TTL (hold_ttl_us NULL).

ALTER TABLE voucher
    ADD COLUMN require_checkout_token BOOLEAN NOT NULL DEFAULT false,
    -- microseconds, as the writers pass the hold; NULL: RESERVATION_TTL
    ADD COLUMN hold_ttl_us BIGINT,
    ADD CONSTRAINT ck_hold_ttl CHECK (hold_ttl_us IS NULL OR hold_ttl_us >= 1000000);

---- create above / drop below ----

ALTER TABLE voucher
    DROP CONSTRAINT ck_hold_ttl,
    DROP COLUMN hold_ttl_us,
    DROP COLUMN require_checkout_token;
