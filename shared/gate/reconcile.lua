#!lua
-- reconcile.lua: one repair step of a reconcile (gate's Reconcile): repair the
-- orders it is given against the database's word on each. A step touches only
-- its own orders, so it is bounded by their number and Redis serves the crowd
-- between steps; reconcile_scan.lua reads the pages the steps are made from and
-- reconcile_end.lua ends the pass. Every repair is per order and idempotent: a
-- step sees the order as it is now, not as the page showed it.
--
-- KEYS[1] voucher:{CODE}:remaining  a restored order takes one (never below 0);
--                                   a freed one gives none back: the last step
--                                   sets remaining, so a step never raises it
--                                   above what the database allows while Redis
--                                   still lacks orders a later step restores
-- KEYS[2] voucher:{CODE}:users      each order moved keeps its customer's count
-- KEYS[3] voucher:{CODE}:orders     hanging orders removed, missing ones added,
--                                   a customer the database disagrees with rewritten
-- KEYS[4] voucher:{CODE}:meta       unused
-- KEYS[5] voucher:{CODE}:done       orders the database holds are removed
-- KEYS[6] voucher:{CODE}:logged     promises (promise.lua): an order promised
--                                   a 201 whose row is not written yet is never
--                                   freed, however old (its record is in the
--                                   admissions log, or may be in flight to it)
-- KEYS[7] voucher:{CODE}:parked     parked orders (parked.lua): an order a
--                                   settler parked is left to it until
--                                   parkedGiveUp past its notBefore
-- ARGV[1]    cutoff, unix millis in Redis's clock: a Redis-only order admitted
--            at or after it is kept, its database write may have been in
--            flight when the database was read (the caller's Redis clock then,
--            less its grace: however late this step runs, a Redis pause or a
--            slow machine meanwhile frees nothing the database read missed)
-- ARGV[2..]  orderId, customerId pairs: customerId "" means the database holds
--            no use for the order (free it if admitted before cutoff); any other
--            is the customer the database holds a use for
--
-- Returns {0} when not loaded (nothing changed), otherwise
-- {1, remainingBefore, remainingAfter, restored, 0, releasedOrderId1, ...}
-- (the 0 is reconcile_end's termsChanged place, so one decoder reads both
-- shapes of result). Released orders are not recorded in done: they have no
-- database row to answer from.
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining.

if #ARGV < 1 or (#ARGV - 1) % 2 ~= 0 then
  return redis.error_reply('ERR reconcile: bad ARGV layout')
end
local cutoff = tonumber(ARGV[1])
if not cutoff then
  return redis.error_reply('ERR reconcile: cutoff is not a number')
end
local before, bad = remainingOf('reconcile')
if bad then return bad end
if not before then
  return {0}
end

local nowText = nowMillis()
local now = tonumber(nowText)
-- gate.ParkedGiveUp, in millis.
local parkedGiveUp = 600000

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
for i = 2, #ARGV, 2 do
  local order, customer = ARGV[i], ARGV[i + 1]
  local value = redis.call('HGET', KEYS[3], order)
  if customer == '' then
    -- A hanging admission: in Redis, not in the database, admitted before the
    -- cutoff. An unreadable admission time counts as old: nothing we wrote
    -- looks like that.
    local promised = KEYS[6] and redis.call('HEXISTS', KEYS[6], order) == 1
    local parkedAt = KEYS[7] and tonumber(redis.call('HGET', KEYS[7], order))
    if parkedAt and parkedAt + parkedGiveUp > now then promised = true end
    if value and not promised and (tonumber(string.match(value, ':(%d+)$')) or 0) < cutoff then
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

if remaining ~= before then
  redis.call('SET', KEYS[1], remaining, 'KEEPTTL')
end
-- users or done may have just been created.
followTTL()

out[3] = remaining
out[4] = restored
return out
