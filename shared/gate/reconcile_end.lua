#!lua
-- reconcile_end.lua: the last step of a reconcile (gate's Reconcile): remaining
-- set from the orders Redis holds, the terms rewritten, in one small script.
-- Set, not moved: HLEN counts every use Redis holds at this instant, the
-- admissions the crowd made between the steps included, so remaining is exact
-- whatever the steps before saw.
--
-- Redis may hold fewer orders than the database snapshot the pass was given
-- had active: those released after the scan saw them (the ledger releases in
-- the database first, then in Redis). remaining then stays at the snapshot's
-- total minus its active orders, never above, and meta keeps the uses held back
-- (reconcileHeld) so that the next pass does not take them for a drifted
-- counter.
--
-- KEYS[1] voucher:{CODE}:remaining  set to max(0, min(totalLimit - HLEN orders,
--                                   totalLimit - active)), totalLimit from ARGV
--                                   (the current terms)
-- KEYS[2] voucher:{CODE}:users      expiry only
-- KEYS[3] voucher:{CODE}:orders     counted (HLEN); expiry
-- KEYS[4] voucher:{CODE}:meta       terms rewritten from ARGV; reconcileHeld;
--                                   generation set (prelude): Redis agrees with
--                                   the database now
-- KEYS[5] voucher:{CODE}:done       expiry only
-- ARGV[1]     owed: the uses the repair steps left out of remaining, the orders
--             they freed minus those they restored while remaining was 0
-- ARGV[2]     active: the database's active orders in the snapshot
-- ARGV[3..11] the terms block (prelude's termsValid): expire-at (unix millis,
--             PEXPIREAT on all five keys), discountAmount, minOrderAmount,
--             totalLimit, perUserLimit, startsAt, endsAt, paused, checkoutToken
--
-- Returns {0} when not loaded (nothing changed), otherwise
-- {1, remainingBefore, remainingAfter, counterRepaired (1/0), termsChanged (1/0)}.
-- counterRepaired: remaining, with what the steps and the last pass held back,
-- did not agree with the orders Redis holds (a counter that drifted or was set
-- by hand, a total limit changed without its Update).
-- Errors (before any write) on a bad ARGV layout or a corrupt remaining.

if #ARGV ~= 11 or not string.match(ARGV[1], '^%-?%d+$') or not string.match(ARGV[2], '^%d+$') or not termsValid(3) then
  return redis.error_reply('ERR reconcile end: bad ARGV layout')
end
local before, bad = remainingOf('reconcile end')
if bad then return bad end
if not before then
  return {0}
end

local total = tonumber(ARGV[6])
local consistent = total - redis.call('HLEN', KEYS[3])
if consistent < 0 then consistent = 0 end
local after = math.min(consistent, total - tonumber(ARGV[2]))
if after < 0 then after = 0 end
local implied = before + tonumber(ARGV[1]) + (tonumber(redis.call('HGET', KEYS[4], 'reconcileHeld')) or 0)
if implied < 0 then implied = 0 end
local out = {1, before, after, 0, 0}
if implied ~= consistent then out[4] = 1 end
redis.call('SET', KEYS[1], after)
if after < consistent then
  redis.call('HSET', KEYS[4], 'reconcileHeld', consistent - after)
else
  redis.call('HDEL', KEYS[4], 'reconcileHeld')
end
if writeTerms(3) then out[5] = 1 end
writeGeneration()
-- users or orders may have been emptied and recreated: every key gets the
-- current end's expiry.
expireAll(ARGV[3])
return out
