#!lua flags=no-writes
-- clock.lua: Redis's clock on the voucher's node (gate's Clock), as unix
-- millis: what a reconcile reads before the database, so that its cutoff for
-- hanging admissions is the moment the database was read, however late the
-- pass's steps run.
--
-- KEYS[1..5] the voucher's keys (unused; they route the call to its node)

return tonumber(nowMillis())
