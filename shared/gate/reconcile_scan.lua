#!lua flags=no-writes
-- reconcile_scan.lua: one page of a reconcile's scan (gate's Reconcile): HSCAN
-- of the voucher's orders or done hash, bounded by its COUNT, so that a
-- voucher holding 100,000 orders is read without blocking Redis for the whole.
-- HSCAN returns every field held for the whole scan at least once, and may
-- return one twice; fields written or removed meanwhile may or may not appear.
--
-- KEYS[1] voucher:{CODE}:remaining  read
-- KEYS[3] voucher:{CODE}:orders     scanned when ARGV[1] is "orders"
-- KEYS[5] voucher:{CODE}:done       scanned when ARGV[1] is "done"
--                                   (KEYS[2], KEYS[4] unused)
-- ARGV[1] "orders" or "done"
-- ARGV[2] the cursor, "0" to start
-- ARGV[3] COUNT, the page's size hint
--
-- Returns {0} when not loaded, otherwise {1, remaining, nowMillis (Redis's
-- clock, so the caller can tell the admissions too young to be hanging),
-- nextCursor ("0": the scan is over), {field1, value1, ...}}. Errors on a bad ARGV or a corrupt
-- remaining.

local key
if ARGV[1] == 'orders' then key = KEYS[3] elseif ARGV[1] == 'done' then key = KEYS[5] end
if not key or not string.match(ARGV[2] or '', '^%d+$') or not tonumber(ARGV[3]) then
  return redis.error_reply('ERR reconcile scan: bad ARGV')
end
local remaining, bad = remainingOf('reconcile scan')
if bad then return bad end
if not remaining then
  return {0}
end
local page = redis.call('HSCAN', key, ARGV[2], 'COUNT', ARGV[3])
return {1, remaining, tonumber(nowMillis()), page[1], page[2]}
