#!lua
-- unload.lua: forget one voucher (admin and tests).
--
-- KEYS[1..5] voucher:{CODE}:remaining, :users, :orders, :meta, :done
-- ARGV       none
--
-- Returns the number of keys deleted.

return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
