-- A voucher's write path (issue 26, the article's Approach B): 'sync' writes
-- an admitted reservation in the ledger's group commit before answering
-- (Approach A, every voucher so far); 'log' produces the admission to Kafka
-- and the ledger's consumer writes it. Only a flash voucher has a gate that
-- admits, so only a flash voucher may use 'log'. Additive: existing vouchers
-- keep 'sync'.

ALTER TABLE voucher
    ADD COLUMN write_path TEXT NOT NULL DEFAULT 'sync',
    ADD CONSTRAINT ck_write_path CHECK (write_path = 'sync' OR (write_path = 'log' AND flash_sale));

---- create above / drop below ----

ALTER TABLE voucher
    DROP CONSTRAINT ck_write_path,
    DROP COLUMN write_path;
