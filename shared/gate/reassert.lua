#!lua
-- reassert.lua: after the database committed admitted orders, make sure Redis
-- still holds each one. Redis may have lost an order while its write was in
-- flight: a reload from the database that ran before the commit (a new
-- generation without the order), or a restart from a snapshot older than the
-- admission. Left alone, a retry of such an order is refused OUT_OF_STOCK until
-- the next reconcile, and remaining counts a use the database already took.
--
-- KEYS[1] voucher:{CODE}:remaining  down by one per order recorded, never below 0
-- KEYS[2] voucher:{CODE}:users      +1 per order recorded
-- KEYS[3] voucher:{CODE}:orders     missing orders recorded at Redis TIME now
-- KEYS[4] voucher:{CODE}:meta       unused
-- KEYS[5] voucher:{CODE}:done       read: an order there gave its use back since
--                                   the commit (a release, an expiry, a refund)
--                                   and is left alone
-- ARGV    orderId1, customerId1, orderId2, customerId2, ...
--
-- Returns the number of orders it recorded: an order already recorded (for any
-- customer: the reconciler settles a conflict), or in done, is left alone; 0 when
-- the voucher is not loaded (the next load reads the database, commit included).
-- Errors (before any write) on a bad ARGV layout.

if #ARGV == 0 or #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR reassert: ARGV must be orderId, customerId pairs')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local now
local recorded = 0
for i = 1, #ARGV, 2 do
  local order, customer = ARGV[i], ARGV[i + 1]
  if redis.call('HEXISTS', KEYS[3], order) == 0 and redis.call('HEXISTS', KEYS[5], order) == 0 then
    now = now or nowMillis()
    redis.call('HSET', KEYS[3], order, customer .. ':' .. now)
    redis.call('HINCRBY', KEYS[2], customer, 1)
    recorded = recorded + 1
  end
end
if recorded > 0 then
  local left = (tonumber(redis.call('GET', KEYS[1])) or 0) - recorded
  if left < 0 then left = 0 end
  redis.call('SET', KEYS[1], left, 'KEEPTTL')
  followTTL()
end
return recorded
