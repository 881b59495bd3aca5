#!lua
-- promise.lua: the promises of a log voucher's admissions whose records are
-- not written yet (the answer a 201 gave, kept until the consumer wrote the
-- row), in the voucher's slot so that one script reads them with its orders.
--
-- KEYS[1] voucher:{CODE}:remaining  its expiry is the promises' (followTTL's way)
-- KEYS[2] voucher:{CODE}:users      unused
-- KEYS[3] voucher:{CODE}:orders     unused
-- KEYS[4] voucher:{CODE}:meta       unused
-- KEYS[5] voucher:{CODE}:done       unused
-- KEYS[6] voucher:{CODE}:logged     hash orderId ->
--         "state:customerId:orderAmount:discountAmount:admittedAtMillis:expiresAtMillis",
--         state p (pending: the record may be in flight to the broker), t
--         (taken over: a retry of a pending promise left by a ledger that
--         died produces its record again, with the same values) or l
--         (logged: the broker acknowledged it)
-- ARGV[1] the operation:
--   "make":   ARGV[2..] orderId1, value1, orderId2, value2, ... (values
--             with state p): records each order's promise unless it has
--             one; the hash takes KEYS[1]'s expiry. Returns one
--             string per order: "" when it recorded it, else the promise it
--             already had.
--   "logged": ARGV[2..] orderIds: a pending or taken-over promise becomes
--             logged. Returns how many changed.
--   "forget": ARGV[2..] orderIds: the promises are removed. Returns how many
--             there were.
--   "abandon": ARGV[2..] orderIds: the pending promises (state p: nobody took
--             them over) are removed, after a produce that failed, each
--             leaving a tombstone (field "#orderId": its admission time in
--             unix millis; "#" is no orderId's character) that tells the
--             consumer to skip the record if the broker kept it after all.
--             Returns one 1 (removed) or 0 per order.
--   "abandoned": ARGV[2..] orderId, admittedAtMillis pairs: one 1 per pair
--             whose promise was abandoned (its tombstone), else 0; a pending
--             or taken-over promise of a pair not abandoned (the same
--             admission time) becomes logged: the consumer holds its record,
--             so the broker kept it, and an "abandon" that comes after (its
--             produce reported a failure all the same) can no longer remove
--             it and give its use back while the row is being written.
--   "settle": ARGV[2..] orderId, admittedAtMillis pairs: the consumer decided
--             these records: the promise goes if it is the record's (the same
--             admission time, or any when the time is ""; a later promise of
--             the order stays), and so does a matching tombstone. Returns how
--             many promises it removed.
--   "takeover": ARGV[2] orderId, ARGV[3] cutoff (unix millis): a pending or
--             taken-over promise admitted before cutoff becomes taken over.
--             Returns 1 if it did, else 0.
--   "stale":  ARGV[2] cutoff (unix millis), ARGV[3] HSCAN cursor, ARGV[4]
--             HSCAN count: the pending or taken-over promises of one HSCAN
--             step admitted before cutoff become taken over (left behind by
--             a ledger that died, or whose Redis step failed, before it
--             logged or abandoned them). Returns the next cursor, then
--             orderId, value pairs of those it took over.
--   "read":   ARGV[2..] orderIds: one string per order, "" when none.
-- Errors (before any write) on an unknown operation or a bad ARGV layout.

local op = ARGV[1]
if op == 'make' then
  if (#ARGV - 1) % 2 ~= 0 then
    return redis.error_reply('ERR promise: make takes orderId, value pairs')
  end
  local out = {}
  for i = 2, #ARGV, 2 do
    local had = redis.call('HGET', KEYS[6], ARGV[i])
    if had then
      out[#out + 1] = had
    else
      redis.call('HSET', KEYS[6], ARGV[i], ARGV[i + 1])
      out[#out + 1] = ''
    end
  end
  local at = redis.call('PEXPIRETIME', KEYS[1])
  if at > 0 then
    redis.call('PEXPIREAT', KEYS[6], at)
  end
  return out
elseif op == 'logged' then
  local n = 0
  for i = 2, #ARGV do
    local had = redis.call('HGET', KEYS[6], ARGV[i])
    if had and (string.sub(had, 1, 2) == 'p:' or string.sub(had, 1, 2) == 't:') then
      redis.call('HSET', KEYS[6], ARGV[i], 'l:' .. string.sub(had, 3))
      n = n + 1
    end
  end
  return n
elseif op == 'forget' then
  if #ARGV < 2 then return 0 end
  return redis.call('HDEL', KEYS[6], unpack(ARGV, 2))
elseif op == 'abandon' then
  local out = {}
  for i = 2, #ARGV do
    local had = redis.call('HGET', KEYS[6], ARGV[i])
    if had and string.sub(had, 1, 2) == 'p:' then
      redis.call('HDEL', KEYS[6], ARGV[i])
      local admitted = string.match(had, '^p:%d+:%-?%d+:%-?%d+:(%d+):')
      if admitted then
        redis.call('HSET', KEYS[6], '#' .. ARGV[i], admitted)
      end
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  return out
elseif op == 'abandoned' then
  local out = {}
  for i = 2, #ARGV, 2 do
    local order, at = ARGV[i], ARGV[i + 1]
    local dead = redis.call('HGET', KEYS[6], '#' .. order)
    if dead and dead == at then
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
      local had = redis.call('HGET', KEYS[6], order)
      if had and at ~= '' and string.match(had, '^[pt]:%d+:%-?%d+:%-?%d+:(%d+):') == at then
        redis.call('HSET', KEYS[6], order, 'l:' .. string.sub(had, 3))
      end
    end
  end
  return out
elseif op == 'settle' then
  local n = 0
  for i = 2, #ARGV, 2 do
    local order, at = ARGV[i], ARGV[i + 1]
    local had = redis.call('HGET', KEYS[6], order)
    if had and (at == '' or string.match(had, '^[ptl]:%d+:%-?%d+:%-?%d+:(%d+):') == at) then
      redis.call('HDEL', KEYS[6], order)
      n = n + 1
    end
    if at ~= '' and redis.call('HGET', KEYS[6], '#' .. order) == at then
      redis.call('HDEL', KEYS[6], '#' .. order)
    end
  end
  return n
elseif op == 'takeover' then
  local had = redis.call('HGET', KEYS[6], ARGV[2])
  local cutoff = tonumber(ARGV[3])
  if not had or not cutoff then return 0 end
  local state, admitted = string.match(had, '^([pt]):%d+:%-?%d+:%-?%d+:(%d+):')
  if not state or tonumber(admitted) >= cutoff then return 0 end
  redis.call('HSET', KEYS[6], ARGV[2], 't:' .. string.sub(had, 3))
  return 1
elseif op == 'stale' then
  local cutoff = tonumber(ARGV[2])
  if not cutoff then
    return redis.error_reply('ERR promise: stale takes a cutoff')
  end
  local step = redis.call('HSCAN', KEYS[6], ARGV[3], 'COUNT', ARGV[4])
  local out = {step[1]}
  local kv = step[2]
  for i = 1, #kv, 2 do
    local admitted = string.match(kv[i + 1], '^[pt]:%d+:%-?%d+:%-?%d+:(%d+):')
    if admitted and tonumber(admitted) < cutoff then
      local taken = 't:' .. string.sub(kv[i + 1], 3)
      redis.call('HSET', KEYS[6], kv[i], taken)
      out[#out + 1] = kv[i]
      out[#out + 1] = taken
    end
  end
  return out
elseif op == 'read' then
  local out = {}
  for i = 2, #ARGV do
    out[#out + 1] = redis.call('HGET', KEYS[6], ARGV[i]) or ''
  end
  return out
end
return redis.error_reply('ERR promise: unknown operation ' .. tostring(op))
