#!lua
-- reserve.lua: admit a batch of orders against one voucher, in ARGV order, exactly
-- as if each item were a separate call. The check and the decrement share one
-- atomic script, so two callers can never both take the last use.
--
-- KEYS[1] voucher:{CODE}:remaining  integer string; missing = voucher not loaded
-- KEYS[2] voucher:{CODE}:users      hash customerId -> active uses
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       hash; reads perUserLimit (the single source)
-- ARGV    customerId1, orderId1, customerId2, orderId2, ...
--
-- Returns {remaining, code1, code2, ...}: remaining after the batch (0 when not
-- loaded), then one code per item:
--   1 RESERVED, 2 DUPLICATE (same order, same customer), 3 OUT_OF_STOCK,
--   4 ALREADY_USED (per-user limit reached), 5 NOT_LOADED (for every item),
--   6 ORDER_CONFLICT (order already recorded for another customer).
-- Errors (before any write) on an odd ARGV count or a corrupt remaining/meta.

if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR reserve: ARGV must be customerId, orderId pairs')
end
local n = #ARGV / 2

local remaining, bad = remainingOf('reserve')
if bad then return bad end
if not remaining then
  local out = {0}
  for i = 1, n do out[i + 1] = 5 end
  return out
end
local limit, noLimit = metaNumber('reserve', 'perUserLimit')
if noLimit then return noLimit end

local now -- admission time, read on the first reservation
local out = {0}
local taken = 0
for i = 1, n do
  local customer, order = ARGV[2 * i - 1], ARGV[2 * i]
  local code
  local held = redis.call('HGET', KEYS[3], order)
  if held then
    -- The customer is the part before the first ':' (customer ids are integers).
    if string.match(held, '^([^:]*)') == customer then code = 2 else code = 6 end
  elseif (tonumber(redis.call('HGET', KEYS[2], customer)) or 0) >= limit then
    code = 4
  elseif remaining <= 0 then
    code = 3
  else
    if not now then
      -- Redis's clock, not a caller's, so the reconciler's grace period compares
      -- times from one clock.
      now = nowMillis()
    end
    remaining = remaining - 1
    taken = taken + 1
    redis.call('HINCRBY', KEYS[2], customer, 1)
    redis.call('HSET', KEYS[3], order, customer .. ':' .. now)
    code = 1
  end
  out[i + 1] = code
end

if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  followTTL()
end
out[1] = remaining
return out
