-- A live sale: vouchers that can be paused and changed, reservations that keep
-- what they were answered with and how they ended, refunds, and an audit trail
-- of every admin change. Additive: existing rows get the values they would have
-- had, and nothing an older ledger reads changes meaning.

ALTER TABLE voucher
    ADD COLUMN paused     BOOLEAN     NOT NULL DEFAULT false,
    ADD COLUMN updated_at TIMESTAMPTZ NOT NULL DEFAULT now();

ALTER TABLE voucher_redemption
    ADD COLUMN order_amount    BIGINT,      -- NULL: written before amounts were kept
    ADD COLUMN discount_amount BIGINT,
    ADD COLUMN confirmed_at    TIMESTAMPTZ,
    ADD COLUMN released_at     TIMESTAMPTZ,
    ADD COLUMN release_reason  VARCHAR(16);

-- Existing rows: the discount they were answered with was the voucher's; a
-- confirmation or a release happened at their last update; a release after the
-- hold's deadline was the sweeper's.
UPDATE voucher_redemption r SET
    discount_amount = v.discount_amount,
    confirmed_at    = CASE WHEN r.status = 'CONFIRMED' THEN r.updated_at END,
    released_at     = CASE WHEN r.status = 'RELEASED' THEN r.updated_at END,
    release_reason  = CASE WHEN r.status <> 'RELEASED' THEN NULL
                           WHEN r.updated_at >= r.expires_at THEN 'EXPIRED'
                           ELSE 'CANCELLED' END
FROM voucher v WHERE v.code = r.voucher_code;

ALTER TABLE voucher_redemption
    ALTER COLUMN discount_amount SET NOT NULL,
    DROP CONSTRAINT ck_status,
    ADD CONSTRAINT ck_status CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED', 'REFUNDED')),
    ADD CONSTRAINT ck_order_amount CHECK (order_amount IS NULL OR order_amount >= 0),
    ADD CONSTRAINT ck_discount_amount CHECK (discount_amount >= 0),
    ADD CONSTRAINT ck_discount_within_order CHECK (order_amount IS NULL OR discount_amount <= order_amount),
    ADD CONSTRAINT ck_release_reason CHECK (
        (status IN ('RESERVED', 'CONFIRMED') AND release_reason IS NULL)
        OR (status = 'RELEASED' AND release_reason IN ('CANCELLED', 'EXPIRED'))
        OR (status = 'REFUNDED' AND release_reason = 'REFUNDED'));

-- Serves the admin listing and export: one voucher's reservations in creation order.
CREATE INDEX ix_redemption_voucher_id ON voucher_redemption (voucher_code, id);

-- Every admin change to a voucher, with the named token that made it.
CREATE TABLE voucher_audit (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    voucher_code VARCHAR(32) NOT NULL REFERENCES voucher(code),
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor        VARCHAR(64) NOT NULL,
    action       VARCHAR(32) NOT NULL,
    before       JSONB,
    after        JSONB
);
CREATE INDEX ix_audit_voucher ON voucher_audit (voucher_code, id);

---- create above / drop below ----

DROP TABLE voucher_audit;
DROP INDEX ix_redemption_voucher_id;
DELETE FROM voucher_redemption WHERE status = 'REFUNDED';
ALTER TABLE voucher_redemption
    DROP CONSTRAINT ck_release_reason,
    DROP CONSTRAINT ck_discount_within_order,
    DROP CONSTRAINT ck_discount_amount,
    DROP CONSTRAINT ck_order_amount,
    DROP CONSTRAINT ck_status,
    ADD CONSTRAINT ck_status CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED')),
    DROP COLUMN release_reason,
    DROP COLUMN released_at,
    DROP COLUMN confirmed_at,
    DROP COLUMN discount_amount,
    DROP COLUMN order_amount;
ALTER TABLE voucher DROP COLUMN updated_at, DROP COLUMN paused;
