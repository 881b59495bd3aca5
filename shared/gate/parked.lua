#!lua
-- parked.lua: the orders a ledger's settler parked (their write failed on a
-- fault, or a proxy could not learn their admission's fate), in the
-- voucher's slot, so that the reconciler of any ledger leaves them to a
-- settler and any ledger's settler can adopt those of a ledger that died.
--
-- KEYS[1] voucher:{CODE}:remaining  its expiry is the hash's (followTTL's way)
-- KEYS[2..5]                        unused
-- KEYS[6] voucher:{CODE}:parked     hash orderId -> notBefore (unix millis:
--                                   when a settler may ask the database)
-- ARGV[1] the operation:
--   "park":   ARGV[2..] orderId, notBeforeMillis pairs: recorded (a later
--             notBefore wins). Returns how many.
--   "unpark": ARGV[2..] orderIds: removed. Returns how many there were.
--   "list":   the hash, as HGETALL.
-- Errors (before any write) on an unknown operation or a bad ARGV layout.

local op = ARGV[1]
if op == 'park' then
  if (#ARGV - 1) % 2 ~= 0 then
    return redis.error_reply('ERR parked: park takes orderId, notBefore pairs')
  end
  for i = 2, #ARGV, 2 do
    local had = tonumber(redis.call('HGET', KEYS[6], ARGV[i]))
    local at = tonumber(ARGV[i + 1])
    if not at then
      return redis.error_reply('ERR parked: notBefore is not a number')
    end
    if not had or had < at then
      redis.call('HSET', KEYS[6], ARGV[i], ARGV[i + 1])
    end
  end
  local expireAt = redis.call('PEXPIRETIME', KEYS[1])
  if expireAt > 0 then
    redis.call('PEXPIREAT', KEYS[6], expireAt)
  end
  return (#ARGV - 1) / 2
elseif op == 'unpark' then
  if #ARGV < 2 then return 0 end
  return redis.call('HDEL', KEYS[6], unpack(ARGV, 2))
elseif op == 'list' then
  return redis.call('HGETALL', KEYS[6])
end
return redis.error_reply('ERR parked: unknown operation ' .. tostring(op))
