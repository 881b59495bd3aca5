#!lua
-- reconcile.lua: bring one voucher's Redis state into agreement with the
-- database's active reservations (the money truth), in one atomic step.
--
-- KEYS[1] voucher:{CODE}:remaining  set to max(0, totalLimit - HLEN orders),
--                                   totalLimit from ARGV (the current terms)
-- KEYS[2] voucher:{CODE}:users      rebuilt from orders
-- KEYS[3] voucher:{CODE}:orders     hanging orders removed, missing ones added
-- KEYS[4] voucher:{CODE}:meta       terms rewritten from ARGV; generation set
--                                   (prelude): Redis agrees with the database now
-- KEYS[5] voucher:{CODE}:done       the database's active orders removed
-- ARGV[1]     grace, millis: a Redis-only order younger than this is kept, its
--             database write may still be in flight
-- ARGV[2..9]  the terms block (prelude's termsValid): expire-at (unix millis,
--             PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--             totalLimit, perUserLimit, startsAt, endsAt, paused
-- ARGV[10..]  orderId, customerId pairs: every reservation the database holds a
--             use for
--
-- Returns {0} when not loaded (nothing changed), otherwise
-- {1, remainingBefore, remainingAfter, restored, termsChanged (1/0),
--  releasedOrderId1, ...}. Released orders are not recorded in done: they have
-- no database row to answer from.
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining.

if #ARGV < 9 or (#ARGV - 9) % 2 ~= 0 or not termsValid(2) then
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
local total = tonumber(ARGV[5])

local nowText = nowMillis()
local now = tonumber(nowText)

local db = {}
for i = 10, #ARGV, 2 do
  db[ARGV[i]] = ARGV[i + 1]
end

-- Hanging admissions: in Redis, not in the database, older than grace. An
-- unreadable admission time counts as old: nothing we wrote looks like that.
local out = {1, before, 0, 0, 0}
local held = redis.call('HGETALL', KEYS[3])
for i = 1, #held, 2 do
  local order, value = held[i], held[i + 1]
  if not db[order] then
    local at = tonumber(string.match(value, ':(%d+)$')) or 0
    if now - at > grace then
      redis.call('HDEL', KEYS[3], order)
      out[#out + 1] = order
    end
  end
end

-- Reservations the database holds but Redis lost. The database also decides the
-- customer when the two disagree; the admission time is kept then.
local restored = 0
for i = 10, #ARGV, 2 do
  local order, customer = ARGV[i], ARGV[i + 1]
  redis.call('HDEL', KEYS[5], order)
  local value = redis.call('HGET', KEYS[3], order)
  if not value then
    redis.call('HSET', KEYS[3], order, customer .. ':' .. nowText)
    restored = restored + 1
  elseif customerOf(value) ~= customer then
    local at = string.match(value, ':(%d+)$') or nowText
    redis.call('HSET', KEYS[3], order, customer .. ':' .. at)
  end
end

redis.call('DEL', KEYS[2])
held = redis.call('HGETALL', KEYS[3])
for i = 2, #held, 2 do
  redis.call('HINCRBY', KEYS[2], customerOf(held[i]), 1)
end

local after = total - #held / 2
if after < 0 then after = 0 end
redis.call('SET', KEYS[1], after)
if writeTerms(2) then out[5] = 1 end
writeGeneration()
-- users was just recreated and orders may have been: every key gets the
-- current end's expiry.
expireAll(ARGV[2])

out[3] = after
out[4] = restored
return out
