#!lua flags=no-writes
-- state.lua: read remaining, every admitted order, the finished orders and
-- Redis's clock in one step, so they agree with each other.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[3] voucher:{CODE}:orders
-- KEYS[5] voucher:{CODE}:done       (KEYS[2], KEYS[4] unused)
-- ARGV    none
--
-- Returns {} when not loaded (remaining missing), otherwise
-- {remaining, nowMillis, {orderId1, "customerId:admittedAtMillis", ...},
--  {finishedOrderId1, ...}}.

local remaining, bad = remainingOf('state')
if bad then return bad end
if not remaining then
  return {}
end
return {remaining, tonumber(nowMillis()), redis.call('HGETALL', KEYS[3]), redis.call('HKEYS', KEYS[5])}
