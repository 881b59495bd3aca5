#!lua flags=no-writes
-- meta.lua: read the cached voucher meta and the remaining count in one step.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[4] voucher:{CODE}:meta       (KEYS[2], KEYS[3], KEYS[5] unused)
-- ARGV    none
--
-- Returns {} when not loaded (remaining missing), otherwise
-- {remaining, discountAmount, minOrderAmount, totalLimit, perUserLimit,
--  startsAt, endsAt, flashSale, paused, checkoutToken}: remaining as an integer, the meta
-- fields as the scripts stored them (nil for a missing field, which the caller
-- rejects).

local remaining, bad = remainingOf('meta')
if bad then return bad end
if not remaining then
  return {}
end
local out = redis.call('HMGET', KEYS[4], 'discountAmount', 'minOrderAmount',
  'totalLimit', 'perUserLimit', 'startsAt', 'endsAt', 'flashSale', 'paused', 'checkoutToken')
-- A meta loaded before pause existed has no paused field: not paused. One
-- loaded before checkout tokens existed has no checkoutToken: none required
-- (none could be, before); the next change or reconcile writes it.
if out[8] == false then
  out[8] = '0'
end
if out[9] == false then
  out[9] = '0'
end
table.insert(out, 1, remaining)
return out
