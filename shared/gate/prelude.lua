-- prelude.lua: the opening the voucher scripts share. gate.go puts it between a
-- script's #! line and the script's own header, so every script can call these.
--
-- remainingOf(script): KEYS[1], the voucher's counter, as a number; nil when the
--   voucher is not loaded; nil and an error reply when it is not a number.
-- metaNumber(script, field): the number in KEYS[4] (the meta hash) under field;
--   nil and an error reply when it is missing or not a number.
-- nowMillis(): Redis's clock as exact unix millis, a string (seconds .. millis).
-- followTTL(): gives KEYS[2] and KEYS[3] the counter's expiry when they have
--   none (they may have just been created), so a finished sale leaves nothing.

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
    for k = 2, 3 do
      if redis.call('PEXPIRETIME', KEYS[k]) == -1 then
        redis.call('PEXPIREAT', KEYS[k], at)
      end
    end
  end
end

