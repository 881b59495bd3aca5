#!lua
-- limit.lua: lower a voucher's totalLimit in Redis before the database, so
-- that the uses held (rows, and admissions whose records are still in the
-- admissions log, which the database does not count yet) are counted by the
-- one atomic step admissions also take.
--
-- KEYS[1] voucher:{CODE}:remaining  lowered by the change of totalLimit
-- KEYS[4] voucher:{CODE}:meta       totalLimit read and rewritten
--         (KEYS[2], KEYS[3], KEYS[5] unused)
-- ARGV[1] the new totalLimit, below meta's
--
-- Returns {0} when not loaded (nothing changed), {-1, remaining, held} when
-- remaining + new - old < 0 (the uses held, old - remaining, exceed the new
-- limit: nothing changed), else {1, remainingBefore, remainingAfter}: remaining
-- moved by new - old and meta's totalLimit is new, so that gate.Update with
-- the same terms afterwards moves nothing, and with the old ones undoes it.
-- Errors (before any write) on a bad ARGV or a corrupt remaining/meta.

local total = tonumber(ARGV[1])
if not total or total < 0 then
  return redis.error_reply('ERR limit: bad totalLimit')
end
local before, bad = remainingOf('limit')
if bad then return bad end
if not before then
  return {0}
end
local old, noTotal = metaNumber('limit', 'totalLimit')
if noTotal then return noTotal end
local after = before + total - old
if after < 0 then
  return {-1, before, old - before}
end
redis.call('SET', KEYS[1], after, 'KEEPTTL')
redis.call('HSET', KEYS[4], 'totalLimit', ARGV[1])
return {1, before, after}
