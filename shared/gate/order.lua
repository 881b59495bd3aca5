#!lua
-- order.lua: which log voucher an orderId is promised on, across vouchers (a
-- key of its own, in the order's slot): the same orderId admitted on two log
-- vouchers before either wrote its row is answered ORDER_CONFLICT on the
-- second, as the database's UNIQUE(order_id) answers it once a row exists.
--
-- KEYS[1] flashgate:order:{ORDERID}  string: the voucher code it is promised on
-- ARGV[1] the operation:
--   "claim": ARGV[2] code, ARGV[3] expiry (unix millis): sets the key to code
--            unless it names another voucher. Returns the code the key names
--            after the call (code when claimed or already ours).
--   "free":  ARGV[2] code: deletes the key if it names code. Returns 1 if it did.
-- Errors on an unknown operation.

local op = ARGV[1]
if op == 'claim' then
  local owner = redis.call('GET', KEYS[1])
  if owner then
    return owner
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
  return ARGV[2]
elseif op == 'free' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
return redis.error_reply('ERR order: unknown operation ' .. tostring(op))
