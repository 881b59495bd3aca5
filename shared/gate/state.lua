#!lua flags=no-writes
-- state.lua: read remaining, every admitted order and Redis's clock in one step,
-- so the three agree with each other.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[2] voucher:{CODE}:orders
-- ARGV    none
--
-- Returns {} when not loaded (remaining missing), otherwise
-- {remaining, nowMillis, orderId1, "customerId:admittedAtMillis", orderId2, ...}.

local remaining, bad = remainingOf('state')
if bad then return bad end
if not remaining then
  return {}
end
local out = {remaining, tonumber(nowMillis())}
local orders = redis.call('HGETALL', KEYS[2])
for i = 1, #orders do
  out[i + 2] = orders[i]
end
return out
