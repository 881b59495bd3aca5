#!lua
-- release.lua: give uses back for orders the gate admitted. Idempotent by orderId:
-- only an order still recorded in orders gives its use back, so a retried or
-- doubled release (sweeper and ledger racing) returns each use at most once.
--
-- KEYS[1] voucher:{CODE}:remaining  integer string; missing = voucher not loaded
-- KEYS[2] voucher:{CODE}:users      hash customerId -> active uses
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
-- ARGV[1] "1" to give the uses back to remaining (a release), "0" to only
--         forget the orders (the database said no use is left, so remaining
--         was too high: not giving the use back brings Redis down to the truth)
-- ARGV[2..] orderId1, orderId2, ...
--
-- Returns the number of orders released (unknown orders are ignored). When the
-- voucher is not loaded it changes nothing and returns 0: an INCR would create a
-- counter without its meta and without a TTL, and the next load rebuilds the
-- state from the database anyway.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end

local released = 0
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[3], ARGV[i])
  if held then
    local customer = string.match(held, '^([^:]*)')
    redis.call('HDEL', KEYS[3], ARGV[i])
    if (tonumber(redis.call('HGET', KEYS[2], customer)) or 0) <= 1 then
      redis.call('HDEL', KEYS[2], customer)
    else
      redis.call('HINCRBY', KEYS[2], customer, -1)
    end
    released = released + 1
  end
end
if released > 0 and ARGV[1] == '1' then
  redis.call('INCRBY', KEYS[1], released)
end
return released
