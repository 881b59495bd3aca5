#!lua
-- reconcile.lua: one step of a reconcile (gate's Reconcile): repair the orders
-- it is given against the database's word on each, and on the last step set
-- remaining from the orders Redis holds and rewrite the terms. A step touches
-- only its own orders, so it is bounded by their number and Redis serves the
-- crowd between steps; reconcile_scan.lua reads the pages the steps are made
-- from. Every repair is per order and idempotent: a step sees the order as it
-- is now, not as the page showed it.
--
-- KEYS[1] voucher:{CODE}:remaining  a restored order takes one (never below 0);
--                                   the last step sets max(0, totalLimit -
--                                   HLEN orders), totalLimit from ARGV
-- KEYS[2] voucher:{CODE}:users      each order moved keeps its customer's count
-- KEYS[3] voucher:{CODE}:orders     hanging orders removed, missing ones added,
--                                   a customer the database disagrees with rewritten
-- KEYS[4] voucher:{CODE}:meta       last step: terms rewritten from ARGV;
--                                   generation set (prelude): Redis agrees with
--                                   the database now
-- KEYS[5] voucher:{CODE}:done       orders the database holds are removed
-- ARGV[1]     grace, millis: a Redis-only order younger than this is kept, its
--             database write may still be in flight
-- ARGV[2..9]  the terms block (prelude's termsValid): expire-at (unix millis,
--             PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--             totalLimit, perUserLimit, startsAt, endsAt, paused
-- ARGV[10]    "1" on the last step, "0" before
-- ARGV[11..]  orderId, customerId pairs: customerId "" means the database holds
--             no use for the order (free it once older than grace); any other
--             is the customer the database holds a use for
--
-- Returns {0} when not loaded (nothing changed), otherwise
-- {1, remainingBefore (of this step), remainingAfter, restored,
--  termsChanged (1/0, always 0 before the last step), releasedOrderId1, ...}.
-- Released orders are not recorded in done: they have no database row to
-- answer from.
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining.

if #ARGV < 10 or (#ARGV - 10) % 2 ~= 0 or not termsValid(2) or (ARGV[10] ~= '0' and ARGV[10] ~= '1') then
  return redis.error_reply('ERR reconcile: bad ARGV layout')
end
local grace = tonumber(ARGV[1])
if not grace then
  return redis.error_reply('ERR reconcile: grace is not a number')
end
local before, bad = remainingOf('reconcile')
if bad then return bad end
if not before then
  return {0}
end

local nowText = nowMillis()
local now = tonumber(nowText)

local function count(customer, by)
  if by < 0 and (tonumber(redis.call('HGET', KEYS[2], customer)) or 0) <= -by then
    redis.call('HDEL', KEYS[2], customer)
  else
    redis.call('HINCRBY', KEYS[2], customer, by)
  end
end

local out = {1, before, 0, 0, 0}
local remaining, restored = before, 0
local anyDone = redis.call('EXISTS', KEYS[5]) == 1
for i = 11, #ARGV, 2 do
  local order, customer = ARGV[i], ARGV[i + 1]
  local value = redis.call('HGET', KEYS[3], order)
  if customer == '' then
    -- A hanging admission: in Redis, not in the database, older than grace. An
    -- unreadable admission time counts as old: nothing we wrote looks like that.
    if value and now - (tonumber(string.match(value, ':(%d+)$')) or 0) > grace then
      redis.call('HDEL', KEYS[3], order)
      count(customerOf(value), -1)
      out[#out + 1] = order
    end
  else
    -- The database holds a use for it, and decides the customer; the admission
    -- time is kept then. It is not finished.
    if anyDone then redis.call('HDEL', KEYS[5], order) end
    if not value then
      redis.call('HSET', KEYS[3], order, customer .. ':' .. nowText)
      count(customer, 1)
      restored = restored + 1
      if remaining > 0 then remaining = remaining - 1 end
    elseif customerOf(value) ~= customer then
      redis.call('HSET', KEYS[3], order, customer .. ':' .. (string.match(value, ':(%d+)$') or nowText))
      count(customerOf(value), -1)
      count(customer, 1)
    end
  end
end

if ARGV[10] == '1' then
  -- Set, not moved: HLEN counts every use Redis holds at this instant, the
  -- admissions the crowd made between the steps included, so remaining is
  -- exact whatever the steps before saw.
  remaining = tonumber(ARGV[5]) - redis.call('HLEN', KEYS[3])
  if remaining < 0 then remaining = 0 end
  redis.call('SET', KEYS[1], remaining)
  if writeTerms(2) then out[5] = 1 end
  writeGeneration()
  -- users or orders may have been emptied and recreated: every key gets the
  -- current end's expiry.
  expireAll(ARGV[2])
else
  if remaining ~= before then
    redis.call('SET', KEYS[1], remaining, 'KEEPTTL')
  end
  followTTL()
end

out[3] = remaining
out[4] = restored
return out
