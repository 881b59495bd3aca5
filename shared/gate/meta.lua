#!lua flags=no-writes
-- meta.lua: read the cached voucher meta and the remaining count in one step.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[2] voucher:{CODE}:meta
-- ARGV    none
--
-- Returns {} when not loaded (remaining missing), otherwise
-- {remaining, discountAmount, minOrderAmount, totalLimit, perUserLimit,
--  startsAt, endsAt, flashSale}: remaining as an integer, the meta fields as the
-- strings load.lua stored (nil for a missing field, which the caller rejects).

local remaining, bad = remainingOf('meta')
if bad then return bad end
if not remaining then
  return {}
end
local out = redis.call('HMGET', KEYS[2], 'discountAmount', 'minOrderAmount',
  'totalLimit', 'perUserLimit', 'startsAt', 'endsAt', 'flashSale')
table.insert(out, 1, remaining)
return out
