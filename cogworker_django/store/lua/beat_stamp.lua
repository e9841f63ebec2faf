-- Stamp this process's last beat with Redis's clock (host clocks may be skewed).
-- KEYS[1] = P:last_beat
-- ARGV[1] = identity
-- Returns the stamp (epoch seconds).
local now = redis.call("TIME")
redis.call("HSET", KEYS[1], ARGV[1], now[1])
return tonumber(now[1])
