#!lua flags=no-writes
-- holder.lua: which customer an order holds a use for, read only: what a
-- proxy asks before it refuses a request at a full admission window, so that
-- a retry of an order that holds its use is never refused (it takes no new use).
--
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
--                                   (KEYS[1], KEYS[2], KEYS[4], KEYS[5] unused)
-- ARGV[1] orderId
--
-- Returns the customerId holding the order's use, or 0 when the order holds
-- none (or the voucher is not loaded). A malformed entry answers 0: the caller
-- then treats the order as new, which only refuses a request.

local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then
  return 0
end
return tonumber(string.match(v, '^(%d+):')) or 0
