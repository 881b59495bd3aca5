-- Admissions of writePath log vouchers that the database refused (the
-- consumer's dead letters, ledger/internal/admissions): each is also in the
-- dead-letter topic, and its Redis use was given back. Listed by
-- GET /admin/admissions/failed until an operator replays or discards it.
-- An unreadable record has no order: its order_id is its offset.

CREATE TABLE admission_failed (
    voucher_code  VARCHAR(32) NOT NULL,
    order_id      VARCHAR(64) NOT NULL,
    customer_id   BIGINT      NOT NULL DEFAULT 0,
    order_amount  BIGINT      NOT NULL DEFAULT 0,
    reason        TEXT        NOT NULL,
    message       TEXT        NOT NULL,
    log_partition INT         NOT NULL,
    log_offset    BIGINT      NOT NULL,
    admitted_at   TIMESTAMPTZ NOT NULL,
    failed_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- NULL while it waits for an operator; then 'replayed' or 'discarded'
    resolution    TEXT,
    resolved_at   TIMESTAMPTZ,
    resolved_by   TEXT,
    PRIMARY KEY (voucher_code, order_id),
    CONSTRAINT ck_resolution CHECK (resolution IS NULL OR resolution IN ('replayed', 'discarded'))
);

CREATE INDEX admission_failed_open ON admission_failed (failed_at) WHERE resolution IS NULL;

---- create above / drop below ----

DROP TABLE admission_failed;
