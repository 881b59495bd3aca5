#!lua
-- reconcile_end.lua: the last step of a reconcile (gate's Reconcile): remaining
-- set from the orders Redis holds, the terms rewritten, in one small script.
-- Set, not moved: HLEN counts every use Redis holds at this instant, the
-- admissions the crowd made between the steps included, so remaining is exact
-- whatever the steps before saw.
--
-- KEYS[1] voucher:{CODE}:remaining  set to max(0, totalLimit - HLEN orders),
--                                   totalLimit from ARGV (the current terms)
-- KEYS[2] voucher:{CODE}:users      expiry only
-- KEYS[3] voucher:{CODE}:orders     counted (HLEN); expiry
-- KEYS[4] voucher:{CODE}:meta       terms rewritten from ARGV; generation set
--                                   (prelude): Redis agrees with the database now
-- KEYS[5] voucher:{CODE}:done       expiry only
-- ARGV[1]     owed: the uses the repair steps left out of remaining, the orders
--             they freed minus those they restored while remaining was 0
-- ARGV[2..9]  the terms block (prelude's termsValid): expire-at (unix millis,
--             PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--             totalLimit, perUserLimit, startsAt, endsAt, paused
--
-- Returns {0} when not loaded (nothing changed), otherwise
-- {1, remainingBefore, remainingAfter, counterRepaired (1/0), termsChanged (1/0)}.
-- counterRepaired: remaining, with what the steps owe it, did not agree with
-- the orders Redis holds (a counter that drifted, or a total limit changed
-- without its Update).
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining.

if #ARGV ~= 9 or not string.match(ARGV[1], '^%-?%d+$') or not termsValid(2) then
  return redis.error_reply('ERR reconcile end: bad ARGV layout')
end
local before, bad = remainingOf('reconcile end')
if bad then return bad end
if not before then
  return {0}
end

local after = tonumber(ARGV[5]) - redis.call('HLEN', KEYS[3])
if after < 0 then after = 0 end
local implied = before + tonumber(ARGV[1])
if implied < 0 then implied = 0 end
local out = {1, before, after, 0, 0}
if implied ~= after then out[4] = 1 end
redis.call('SET', KEYS[1], after)
if writeTerms(2) then out[5] = 1 end
writeGeneration()
-- users or orders may have been emptied and recreated: every key gets the
-- current end's expiry.
expireAll(ARGV[2])
return out
