#!lua
-- load.lua: warm one voucher from a database snapshot, all four keys in one step.
-- It only loads when remaining does not exist: a live counter is newer than any
-- snapshot, and overwriting it could hand out uses a second time.
--
-- KEYS[1] voucher:{CODE}:remaining  set to ARGV[1]
-- KEYS[2] voucher:{CODE}:users      rebuilt: customerId -> number of orders below
-- KEYS[3] voucher:{CODE}:orders     rebuilt: orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       rebuilt from ARGV[3..9]
-- ARGV[1]    remaining
-- ARGV[2]    expire-at, unix millis (PEXPIREAT on all four keys)
-- ARGV[3..9] discountAmount, minOrderAmount, totalLimit, perUserLimit,
--            startsAt, endsAt (unix millis), flashSale ("1"/"0")
-- ARGV[10..] orderId, customerId, admittedAtMillis triples ("0" = Redis TIME now)
--
-- Returns 1 if it loaded, 0 if remaining already existed (nothing changed),
-- -1 if expire-at has already passed (nothing changed: the keys would vanish at once).

if (#ARGV - 9) % 3 ~= 0 or #ARGV < 9 then
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
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[4],
  'discountAmount', ARGV[3], 'minOrderAmount', ARGV[4],
  'totalLimit', ARGV[5], 'perUserLimit', ARGV[6],
  'startsAt', ARGV[7], 'endsAt', ARGV[8], 'flashSale', ARGV[9])
for i = 10, #ARGV, 3 do
  local order, customer, at = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if at == '0' then at = now end
  -- HSETNX so a repeated order counts once toward its customer.
  if redis.call('HSETNX', KEYS[3], order, customer .. ':' .. at) == 1 then
    redis.call('HINCRBY', KEYS[2], customer, 1)
  end
end
for k = 1, 4 do
  redis.call('PEXPIREAT', KEYS[k], ARGV[2])
end
return 1
