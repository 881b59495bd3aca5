#!lua flags=no-writes
-- fingerprint.lua: a cheap summary of a voucher's Redis state, which changes
-- whenever an order is admitted, given back, restored or released. The
-- reconciler compares it with the one it read after its last clean pass to
-- skip a voucher that nothing has touched since (gate.Fingerprint). It leaves
-- the generation out on purpose: each reconcile writes a new one, so with it two
-- ledgers would take turns making each other's passes look necessary.
--
-- KEYS[1] voucher:{CODE}:remaining
-- KEYS[2] voucher:{CODE}:users
-- KEYS[3] voucher:{CODE}:orders
-- KEYS[4] voucher:{CODE}:meta       unused
-- KEYS[5] voucher:{CODE}:done
-- ARGV    none
--
-- Returns {} when the voucher is not loaded, else {remaining, HLEN orders,
-- HLEN users, HLEN done}.

local remaining = redis.call('GET', KEYS[1])
if not remaining then
  return {}
end
return {remaining, redis.call('HLEN', KEYS[3]), redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[5])}
