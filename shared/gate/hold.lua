#!lua
-- hold.lua: make Redis hold a use for an order the database says holds one
-- (reserved or confirmed). It repairs a race in which Redis gave the order's
-- use back (a release, a refused write's give-back) while the database took
-- the use again (a late confirmation). Idempotent: an order already recorded
-- for this customer is left alone.
--
-- KEYS[1] voucher:{CODE}:remaining  integer string; missing = voucher not loaded
-- KEYS[2] voucher:{CODE}:users      hash customerId -> active uses
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       perUserLimit, read with ARGV[3] "take"
-- KEYS[5] voucher:{CODE}:done       the order is removed: it holds a use again
-- ARGV[1] orderId
-- ARGV[2] customerId
-- ARGV[3] optional "take": the use is taken here first, before the database
--         (a late confirmation of a writePath log voucher, whose database does
--         not count the uses promised by records still in the admissions log):
--         refused with -2 when no use is left, -3 when the customer holds
--         perUserLimit uses, and -4 when the voucher is not loaded; pause,
--         window and minimum do not apply to a payment for an order placed
--         earlier.
--
-- Returns 1 if it recorded the order, 0 if it was already recorded for this
-- customer or the voucher is not loaded (the next load reads the database),
-- -1 if the order is recorded for another customer (the reconciler settles it).
-- remaining goes down by one but never below 0: the database already counted
-- this use, and a counter at 0 admits no one either way. users and orders get
-- the counter's expiry when it (re)creates them (followTTL), as every script
-- that writes them does.

local take = ARGV[3] == 'take'
if redis.call('EXISTS', KEYS[1]) == 0 then
  if take then return -4 end
  return 0
end
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held then
  if customerOf(held) == ARGV[2] then return 0 end
  return -1
end
if take then
  local limit, missing = metaNumber('hold', 'perUserLimit')
  if missing then return missing end
  if (tonumber(redis.call('HGET', KEYS[2], ARGV[2])) or 0) >= limit then return -3 end
  if (tonumber(redis.call('GET', KEYS[1])) or 0) <= 0 then return -2 end
end
redis.call('HDEL', KEYS[5], ARGV[1])
local now = nowMillis()
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. now)
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
if (tonumber(redis.call('GET', KEYS[1])) or 0) > 0 then
  redis.call('DECR', KEYS[1])
end
followTTL()
return 1
