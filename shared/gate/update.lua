#!lua
-- update.lua: apply a voucher's changed terms (an admin change, a pause or a
-- resume) to its loaded keys, in one atomic step.
--
-- KEYS[1] voucher:{CODE}:remaining  moved by the change of totalLimit
-- KEYS[2] voucher:{CODE}:users      expiry only
-- KEYS[3] voucher:{CODE}:orders     counted (the cap below); expiry
-- KEYS[4] voucher:{CODE}:meta       reads the old totalLimit, rewritten from ARGV
-- KEYS[5] voucher:{CODE}:done       expiry only
-- ARGV[1..9] the terms block (prelude's termsValid): expire-at (unix millis,
--            PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--            totalLimit, perUserLimit, startsAt, endsAt, paused, checkoutToken
--
-- remaining becomes remaining + (new totalLimit - meta's totalLimit), at least 0
-- and at most new totalLimit - HLEN orders (the uses held never exceed the new
-- limit with it: the cap only bites on a state that could already oversell).
-- Moving by the delta keeps the uses admitted meanwhile; as meta then holds the
-- new totalLimit, the same update a second time moves nothing.
--
-- Returns {0} when not loaded (nothing changed: the next load reads the
-- database), otherwise {1, remainingBefore, remainingAfter}.
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining/meta.

if #ARGV ~= 9 or not termsValid(1) then
  return redis.error_reply('ERR update: bad ARGV layout')
end
local before, bad = remainingOf('update')
if bad then return bad end
if not before then
  return {0}
end
local oldTotal, noTotal = metaNumber('update', 'totalLimit')
if noTotal then return noTotal end

local total = tonumber(ARGV[4])
local after = math.min(before + total - oldTotal, total - redis.call('HLEN', KEYS[3]))
if after < 0 then after = 0 end
redis.call('SET', KEYS[1], after)
writeTerms(1)
expireAll(ARGV[1])
return {1, before, after}
