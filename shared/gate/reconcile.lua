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

-- The script runs atomically, so Redis serves nothing else meanwhile: every
-- pass over the orders works on Lua tables, and Redis is written in chunks of
-- at most `chunk` fields, not a call per order (50,000 orders: 143 ms a pass
-- instead of 200, most of it now Redis turning ARGV and HGETALL's answer into
-- Lua strings; gate's BenchmarkReconcile).
local chunk = 500
local function each(list, width, call)
  for i = 1, #list, chunk * width do
    call(unpack(list, i, math.min(i + chunk * width - 1, #list)))
  end
end

-- Hanging admissions: in Redis, not in the database, older than grace. An
-- unreadable admission time counts as old: nothing we wrote looks like that.
-- orders is what Redis holds once they are gone, order -> value.
local out = {1, before, 0, 0, 0}
local orders = {}
local held = redis.call('HGETALL', KEYS[3])
local hanging = {}
for i = 1, #held, 2 do
  local order, value = held[i], held[i + 1]
  local keep = db[order] ~= nil
  if not keep then
    local at = tonumber(string.match(value, ':(%d+)$')) or 0
    keep = now - at <= grace
  end
  if keep then
    orders[order] = value
  else
    hanging[#hanging + 1] = order
    out[#out + 1] = order
  end
end
held = nil
each(hanging, 1, function(...) redis.call('HDEL', KEYS[3], ...) end)

-- Reservations the database holds but Redis lost. The database also decides the
-- customer when the two disagree; the admission time is kept then. None of
-- them is finished.
local restored = 0
local writes, finished = {}, {}
local anyDone = redis.call('EXISTS', KEYS[5]) == 1
for i = 10, #ARGV, 2 do
  local order, customer = ARGV[i], ARGV[i + 1]
  if anyDone then finished[#finished + 1] = order end
  local value = orders[order]
  if not value then
    value = customer .. ':' .. nowText
    restored = restored + 1
  elseif customerOf(value) ~= customer then
    value = customer .. ':' .. (string.match(value, ':(%d+)$') or nowText)
  else
    value = nil
  end
  if value then
    orders[order] = value
    writes[#writes + 1] = order
    writes[#writes + 1] = value
  end
end
each(finished, 1, function(...) redis.call('HDEL', KEYS[5], ...) end)
each(writes, 2, function(...) redis.call('HSET', KEYS[3], ...) end)

-- users, rebuilt from orders.
local counts, count = {}, 0
for _, value in pairs(orders) do
  local customer = customerOf(value)
  counts[customer] = (counts[customer] or 0) + 1
  count = count + 1
end
local users = {}
for customer, n in pairs(counts) do
  users[#users + 1] = customer
  users[#users + 1] = n
end
redis.call('DEL', KEYS[2])
each(users, 2, function(...) redis.call('HSET', KEYS[2], ...) end)

local after = total - count
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
