#!lua flags=no-writes
-- generation.lua: whether this Redis process wrote the voucher's state from the
-- database itself (a load or a reconcile), or got it some other way: a restart
-- that read a snapshot or an append-only file, a replica promoted by a failover.
-- Such a state may lack orders the database wrote after it was saved, whose
-- retries the gate would refuse (OUT_OF_STOCK) until a reconcile restores them.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[4] voucher:{CODE}:meta       reads generation (KEYS[2], KEYS[3], KEYS[5] unused)
-- ARGV    none
--
-- Returns 0 when not loaded (the next load reads the database), 1 when meta's
-- generation names this process, 2 otherwise (another process, or no generation:
-- loaded before generations existed, which a reconcile brings up to date).

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local gen = redis.call('HGET', KEYS[4], 'generation')
if gen and string.match(gen, '^(%x+):') == runId() then
  return 1
end
return 2
