#!lua
-- unload.lua: forget one voucher (admin and tests).
--
-- KEYS[1..4] voucher:{CODE}:remaining, :users, :orders, :meta
-- ARGV       none
--
-- Returns the number of keys deleted.

return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
