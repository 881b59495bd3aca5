-- prelude.lua: the opening the voucher scripts share. gate.go puts it between a
-- script's #! line and the script's own header, so every script can call these.
-- Every script takes the voucher's five keys in gate.Keys order:
-- KEYS[1] remaining, KEYS[2] users, KEYS[3] orders, KEYS[4] meta, KEYS[5] done.
--
-- remainingOf(script): KEYS[1], the voucher's counter, as a number; nil when the
--   voucher is not loaded; nil and an error reply when it is not a number.
-- metaNumber(script, field): the number in KEYS[4] (the meta hash) under field;
--   nil and an error reply when it is missing or not a number.
-- nowMillis(): Redis's clock as exact unix millis, a string (seconds .. millis).
-- followTTL(): gives users, orders and done the counter's expiry when they have
--   none (they may have just been created), so a finished sale leaves nothing.
-- termsValid(from): whether ARGV[from .. from+8] is a terms block (gate's
--   termsArgs: expire-at, discountAmount, minOrderAmount, totalLimit,
--   perUserLimit, startsAt, endsAt, paused, checkoutToken), all integers,
--   paused and checkoutToken "0"/"1". checkoutToken (the voucher requires a
--   signed checkout token) is kept for the proxy, which reads its terms here
--   and checks the token before the gate; no script reads it.
-- writeTerms(from): writes that block's eight terms into meta and returns
--   whether any of them changed.
-- expireAll(at): PEXPIREAT at on every key.
-- customerOf(value): the customer id in an orders value "customerId:millis".
-- runId(): this redis-server process's run_id (INFO server): a new one at every
--   start, also after a restart that reloads a snapshot, and on a replica
--   promoted by a failover.
-- writeGeneration(): sets meta's generation to runId() .. ':' .. Redis TIME in
--   unix micros: the voucher's state was just written from the database by this
--   process (each load and reconcile is a new generation). A meta whose
--   generation names another process (or has none: it was loaded before
--   generations existed) may lack orders the database wrote since: the ledger
--   reconciles it (generation.lua).

local function remainingOf(script)
  local raw = redis.call('GET', KEYS[1])
  if not raw then
    return nil
  end
  local n = tonumber(raw)
  if not n then
    return nil, redis.error_reply('ERR ' .. script .. ': ' .. KEYS[1] .. ' is not a number')
  end
  return n
end

local function metaNumber(script, field)
  local n = tonumber(redis.call('HGET', KEYS[4], field))
  if not n then
    return nil, redis.error_reply('ERR ' .. script .. ': ' .. KEYS[4] .. ' has no ' .. field)
  end
  return n
end

local function nowMillis()
  local t = redis.call('TIME')
  return t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end

local function followTTL()
  local at = redis.call('PEXPIRETIME', KEYS[1])
  if at > 0 then
    for _, k in ipairs({2, 3, 5}) do
      if redis.call('PEXPIRETIME', KEYS[k]) == -1 then
        redis.call('PEXPIREAT', KEYS[k], at)
      end
    end
  end
end

local termFields = {'discountAmount', 'minOrderAmount', 'totalLimit',
  'perUserLimit', 'startsAt', 'endsAt', 'paused', 'checkoutToken'}

local function termsValid(from)
  for i = from, from + 8 do
    if not ARGV[i] or not string.match(ARGV[i], '^%-?%d+$') then
      return false
    end
  end
  return (ARGV[from + 7] == '0' or ARGV[from + 7] == '1') and (ARGV[from + 8] == '0' or ARGV[from + 8] == '1')
end

local function writeTerms(from)
  local old = redis.call('HMGET', KEYS[4], unpack(termFields))
  local args, changed = {}, false
  for i, field in ipairs(termFields) do
    local value = ARGV[from + i]
    changed = changed or old[i] ~= value
    args[#args + 1] = field
    args[#args + 1] = value
  end
  redis.call('HSET', KEYS[4], unpack(args))
  return changed
end

local function expireAll(at)
  for k = 1, #KEYS do
    redis.call('PEXPIREAT', KEYS[k], at)
  end
end

local function customerOf(value)
  return string.match(value, '^([^:]*)')
end

local function runId()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

local function writeGeneration()
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[4], 'generation', runId() .. ':' .. t[1] .. string.format('%06d', tonumber(t[2])))
end
