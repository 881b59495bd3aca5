-- The article's schema, kept by name, with TIMESTAMPTZ everywhere, CHECKs on
-- amounts and limits, reservation expiry, and a counting table that lets the
-- database itself enforce per-customer limits above 1.

CREATE TABLE voucher (
    code             VARCHAR(32) PRIMARY KEY,
    discount_amount  BIGINT      NOT NULL,
    min_order_amount BIGINT      NOT NULL DEFAULT 0,
    total_limit      INT         NOT NULL,
    used_count       INT         NOT NULL DEFAULT 0,
    per_user_limit   INT         NOT NULL DEFAULT 1,
    starts_at        TIMESTAMPTZ NOT NULL,
    ends_at          TIMESTAMPTZ NOT NULL,
    flash_sale       BOOLEAN     NOT NULL DEFAULT false,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT ck_used CHECK (used_count <= total_limit),
    CONSTRAINT ck_used_nonneg CHECK (used_count >= 0),
    CONSTRAINT ck_code CHECK (code ~ '^[A-Za-z0-9_-]{1,32}$'),
    CONSTRAINT ck_discount CHECK (discount_amount > 0),
    CONSTRAINT ck_min_order CHECK (min_order_amount >= 0),
    CONSTRAINT ck_total_limit CHECK (total_limit >= 0),
    CONSTRAINT ck_per_user_limit CHECK (per_user_limit >= 1),
    CONSTRAINT ck_window CHECK (starts_at < ends_at)
);

CREATE TABLE voucher_redemption (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    voucher_code VARCHAR(32) NOT NULL REFERENCES voucher(code),
    customer_id  BIGINT      NOT NULL,
    order_id     VARCHAR(64) NOT NULL,
    status       VARCHAR(16) NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    CONSTRAINT uq_order UNIQUE (order_id),
    CONSTRAINT ck_status CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED')),
    CONSTRAINT ck_customer CHECK (customer_id > 0),
    CONSTRAINT ck_order_id CHECK (order_id ~ '^[A-Za-z0-9_.:-]{1,64}$')
);

-- Serves the expiry sweep: only live reservations, oldest deadline first.
CREATE INDEX ix_redemption_expiry ON voucher_redemption (expires_at) WHERE status = 'RESERVED';
-- Serves per-voucher counts, reconciliation and warmup.
CREATE INDEX ix_redemption_voucher_status ON voucher_redemption (voucher_code, status);

-- One row per (voucher, customer): the uses the customer holds now (RESERVED +
-- CONFIRMED). per_user_limit is copied from the voucher so that a CHECK, not
-- code, stops a customer above the limit. UNIQUE(voucher_code, customer_id) on
-- voucher_redemption would only work for a limit of 1 and would also block a
-- customer whose reservation was released.
CREATE TABLE voucher_customer_usage (
    voucher_code   VARCHAR(32) NOT NULL REFERENCES voucher(code),
    customer_id    BIGINT      NOT NULL,
    used_count     INT         NOT NULL,
    per_user_limit INT         NOT NULL,
    PRIMARY KEY (voucher_code, customer_id),
    CONSTRAINT ck_usage_limit CHECK (used_count <= per_user_limit),
    CONSTRAINT ck_usage_nonneg CHECK (used_count >= 0)
);

---- create above / drop below ----

DROP TABLE voucher_customer_usage;
DROP TABLE voucher_redemption;
DROP TABLE voucher;
