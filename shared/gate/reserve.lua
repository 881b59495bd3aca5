#!lua
-- reserve.lua: admit a batch of orders against one voucher, in ARGV order, exactly
-- as if each item were a separate call. The check and the decrement share one
-- atomic script, so two callers can never both take the last use.
--
-- KEYS[1] voucher:{CODE}:remaining  integer string; missing = voucher not loaded
-- KEYS[2] voucher:{CODE}:users      hash customerId -> active uses
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       hash; reads paused, startsAt, endsAt,
--                                   minOrderAmount, perUserLimit (the single source)
-- KEYS[5] voucher:{CODE}:done       hash orderId -> customerId of finished orders
-- ARGV    customerId1, orderId1, orderAmount1, customerId2, orderId2, ...
--
-- Checks per item, in this order (the order's own state first, so a retry of a
-- held order is always answered from its row, whatever changed since):
--   held in orders -> 2 DUPLICATE (same customer) or 6 ORDER_CONFLICT;
--   in done -> 7 FINISHED; paused -> 8 PAUSED; Redis TIME < startsAt ->
--   9 NOT_STARTED; TIME >= endsAt -> 10 ENDED; orderAmount < minOrderAmount ->
--   11 TOO_SMALL; users[customer] >= perUserLimit -> 4 ALREADY_USED;
--   remaining <= 0 -> 3 OUT_OF_STOCK; else 1 RESERVED.
-- TIME is read once per call, for the window and the admission times alike.
--
-- Returns {remaining, code1, code2, ...}: remaining after the batch (0 when not
-- loaded), then one code per item; 5 NOT_LOADED for every item when remaining
-- is missing. Errors (before any write) on a bad ARGV layout, a non-integer
-- amount or a corrupt remaining/meta.

if #ARGV % 3 ~= 0 then
  return redis.error_reply('ERR reserve: ARGV must be customerId, orderId, orderAmount triples')
end
local n = #ARGV / 3

local remaining, bad = remainingOf('reserve')
if bad then return bad end
if not remaining then
  local out = {0}
  for i = 1, n do out[i + 1] = 5 end
  return out
end
local terms = {}
-- A meta loaded before pause existed has no paused field: not paused (the
-- next update or reconcile writes it). Any other missing field is an error.
if redis.call('HEXISTS', KEYS[4], 'paused') == 0 then
  terms.paused = 0
end
for _, field in ipairs({'perUserLimit', 'minOrderAmount', 'startsAt', 'endsAt', 'paused'}) do
  if terms[field] == nil then
    local v, missing = metaNumber('reserve', field)
    if missing then return missing end
    terms[field] = v
  end
end
for i = 3, #ARGV, 3 do
  if not tonumber(ARGV[i]) then
    return redis.error_reply('ERR reserve: orderAmount ' .. ARGV[i] .. ' is not a number')
  end
end

local nowText, now -- Redis's clock, read once, when an item first needs it
local out = {0}
local taken = 0
for i = 1, n do
  local customer, order, amount = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  local code
  local held = redis.call('HGET', KEYS[3], order)
  if held then
    if customerOf(held) == customer then code = 2 else code = 6 end
  elseif redis.call('HEXISTS', KEYS[5], order) == 1 then
    code = 7
  elseif terms.paused == 1 then
    code = 8
  else
    if not now then
      -- Redis's clock, not a caller's: the window is judged by one clock for
      -- every proxy, and the reconciler's grace compares admission times from it.
      nowText = nowMillis()
      now = tonumber(nowText)
    end
    if now < terms.startsAt then
      code = 9
    elseif now >= terms.endsAt then
      code = 10
    elseif amount < terms.minOrderAmount then
      code = 11
    elseif (tonumber(redis.call('HGET', KEYS[2], customer)) or 0) >= terms.perUserLimit then
      code = 4
    elseif remaining <= 0 then
      code = 3
    else
      remaining = remaining - 1
      taken = taken + 1
      redis.call('HINCRBY', KEYS[2], customer, 1)
      redis.call('HSET', KEYS[3], order, customer .. ':' .. nowText)
      code = 1
    end
  end
  out[i + 1] = code
end

if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  followTTL()
end
out[1] = remaining
return out
