#!lua
-- load.lua: warm one voucher from a database snapshot, all five keys in one step.
-- It only loads when remaining does not exist: a live counter is newer than any
-- snapshot, and overwriting it could hand out uses a second time.
--
-- KEYS[1] voucher:{CODE}:remaining  set to ARGV[1]
-- KEYS[2] voucher:{CODE}:users      rebuilt: customerId -> number of orders below
-- KEYS[3] voucher:{CODE}:orders     rebuilt: orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       rebuilt from the terms and flashSale; its
--                                   generation names this load (prelude)
-- KEYS[5] voucher:{CODE}:done       rebuilt: orderId -> customerId, finished orders
-- KEYS[6] voucher:{CODE}:logged     optional, read: promises (promise.lua) of
--                                   admissions whose rows the database does not
--                                   hold yet survive an unload; each order not
--                                   among the snapshot's is held again, taking a
--                                   use (remaining never below 0), so that the
--                                   records still in the admissions log are not
--                                   sold a second time
-- ARGV[1]    remaining
-- ARGV[2..10] the terms block (prelude's termsValid): expire-at (unix millis,
--            PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--            totalLimit, perUserLimit, startsAt, endsAt (unix millis), paused,
--            checkoutToken
-- ARGV[11]   flashSale ("1"/"0")
-- ARGV[12]   n, the number of active orders
-- then n orderId, customerId, admittedAtMillis triples ("0" = Redis TIME now),
-- then orderId, customerId pairs of finished orders
--
-- Returns 1 if it loaded, 0 if remaining already existed (nothing changed),
-- -1 if expire-at has already passed (nothing changed: the keys would vanish at once).

local n = tonumber(ARGV[12])
if #ARGV < 12 or not termsValid(2) or not n or n < 0 or 12 + 3 * n > #ARGV or (#ARGV - 12 - 3 * n) % 2 ~= 0 then
  return redis.error_reply('ERR load: bad ARGV layout')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end

local now = nowMillis()
if tonumber(ARGV[2]) <= tonumber(now) then
  return -1
end

-- Leftovers of an earlier load (remaining expired or was evicted) are stale.
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('SET', KEYS[1], ARGV[1])
writeTerms(2)
redis.call('HSET', KEYS[4], 'flashSale', ARGV[11])
writeGeneration()
local last = 12 + 3 * n
for i = 13, last, 3 do
  local order, customer, at = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if at == '0' then at = now end
  -- HSETNX so a repeated order counts once toward its customer.
  if redis.call('HSETNX', KEYS[3], order, customer .. ':' .. at) == 1 then
    redis.call('HINCRBY', KEYS[2], customer, 1)
  end
end
for i = last + 1, #ARGV, 2 do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
end
if KEYS[6] then
  local promised = redis.call('HGETALL', KEYS[6])
  local left = tonumber(ARGV[1])
  for i = 1, #promised, 2 do
    local order = promised[i]
    local customer, at = string.match(promised[i + 1], '^[ptl]:(%d+):%-?%d+:%-?%d+:(%d+):')
    if customer and redis.call('HSETNX', KEYS[3], order, customer .. ':' .. at) == 1 then
      redis.call('HINCRBY', KEYS[2], customer, 1)
      redis.call('HDEL', KEYS[5], order)
      if left > 0 then left = left - 1 end
    end
  end
  redis.call('SET', KEYS[1], left)
end
expireAll(ARGV[2])
return 1
