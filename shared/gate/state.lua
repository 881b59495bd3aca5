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

local raw = redis.call('GET', KEYS[1])
if not raw then
  return {}
end
local remaining = tonumber(raw)
if not remaining then
  return redis.error_reply('ERR state: ' .. KEYS[1] .. ' is not a number')
end
local t = redis.call('TIME')
local out = {remaining, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
local orders = redis.call('HGETALL', KEYS[2])
for i = 1, #orders do
  out[i + 2] = orders[i]
end
return out
