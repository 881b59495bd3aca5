-- floor.lua: the least an admission's batched script call does, for
-- `loadtest floor`: record each claim's order, take the uses at once.
-- KEYS[1] the orders hash, KEYS[2] the remaining counter
-- ARGV    one orderId per claim of the batch
-- returns the counter after the batch
local n = #ARGV
for i = 1, n do
  redis.call('HSET', KEYS[1], ARGV[i], '1')
end
return redis.call('DECRBY', KEYS[2], n)
