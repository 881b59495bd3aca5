#!lua
-- release.lua: give uses back for orders the gate admitted. Idempotent by orderId:
-- only an order still recorded in orders gives its use back, so a retried or
-- doubled release (sweeper and ledger racing) returns each use at most once.
--
-- KEYS[1] voucher:{CODE}:remaining  integer string; missing = voucher not loaded
-- KEYS[2] voucher:{CODE}:users      hash customerId -> active uses
-- KEYS[3] voucher:{CODE}:orders     hash orderId -> "customerId:admittedAtMillis"
-- KEYS[4] voucher:{CODE}:meta       totalLimit read: remaining never goes above it minus
--                                   the orders still held
-- KEYS[5] voucher:{CODE}:done       hash orderId -> customerId of finished orders
-- KEYS[6] voucher:{CODE}:logged     optional: promises (promise.lua); "giveback"
--                                   and "drop" skip a promised order (its 201
--                                   stands and its record is, or may be, in the
--                                   admissions log): forget the promise first
-- ARGV[1] the mode:
--         "release"  give the uses back and record the orders in done (their
--                    database row gave its use back: cancel, expiry, refund)
--         "giveback" give the uses back only (the database has no row: a
--                    failed write, whose retry may be admitted again)
--         "drop"     only forget the orders (the database said no use is left,
--                    so remaining was too high: not giving the use back brings
--                    Redis down to the truth)
-- ARGV[2..] orderId1, orderId2, ...
--
-- A give-back that takes remaining from 0 to more publishes the voucher's code on
-- flashgate:voucher-changes (gate.ChangesChannel), in the same script: a proxy
-- holding the voucher sold out knows only the orders Redis held when it set its
-- flag, and another proxy may now admit a new order with the use that came
-- back, whose retry the flag would refuse. Every proxy drops its flag on it.
--
-- Returns the number of orders released (unknown orders are ignored and not
-- recorded in done: their customer is not known). When the voucher is not loaded
-- it changes nothing and returns 0: an INCR would create a counter without its
-- meta and without a TTL, and the next load rebuilds the state from the database
-- anyway. Errors (before any write) on an unknown mode.

local mode = ARGV[1]
if mode ~= 'release' and mode ~= 'giveback' and mode ~= 'drop' then
  return redis.error_reply('ERR release: unknown mode ' .. tostring(mode))
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end

local released = 0
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[3], ARGV[i])
  if held and mode ~= 'release' and KEYS[6] and redis.call('HEXISTS', KEYS[6], ARGV[i]) == 1 then
    held = nil
  end
  if held then
    local customer = customerOf(held)
    redis.call('HDEL', KEYS[3], ARGV[i])
    if (tonumber(redis.call('HGET', KEYS[2], customer)) or 0) <= 1 then
      redis.call('HDEL', KEYS[2], customer)
    else
      redis.call('HINCRBY', KEYS[2], customer, -1)
    end
    if mode == 'release' then
      redis.call('HSET', KEYS[5], ARGV[i], customer)
    end
    released = released + 1
  end
end
if released > 0 and mode ~= 'drop' then
  -- Never above totalLimit minus the uses still held: a lowered limit may
  -- have floored remaining at 0 while admissions the database then refused
  -- still held uses (update.lua's cap), and giving those back must not lift
  -- remaining above what the limit leaves.
  local left = redis.call('INCRBY', KEYS[1], released)
  local before = left - released
  local total = tonumber(redis.call('HGET', KEYS[4], 'totalLimit'))
  if total then
    local cap = total - redis.call('HLEN', KEYS[3])
    if cap < 0 then cap = 0 end
    if left > cap then
      redis.call('SET', KEYS[1], cap, 'KEEPTTL')
      left = cap
    end
  end
  if before <= 0 and left > 0 then
    local code = string.match(KEYS[1], '^voucher:{(.+)}:remaining$')
    if code then
      redis.call('PUBLISH', 'flashgate:voucher-changes', code)
    end
  end
end
if released > 0 and mode == 'release' then
  followTTL()
end
return released
