-- Stamp this process's last beat with Redis's clock (host clocks may be skewed).
-- KEYS[1] = P:last_beat
-- ARGV[1] = identity
-- Returns the stamp (epoch seconds), negated when this identity had none before: on any
-- beat but a process's first, orphan recovery took it for dead and forgot it (it drops
-- the stamp before it moves a dead process's jobs), and the heartbeat fences its runs.
local now = redis.call("TIME")
local before = redis.call("HSET", KEYS[1], ARGV[1], now[1])
if before == 1 then
  return -tonumber(now[1])
end
return tonumber(now[1])
