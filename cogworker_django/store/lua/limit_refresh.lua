-- Keep a run's concurrency leases alive (the heartbeat, while the run goes on).
-- KEYS[i] = P:limit:<name>:leases (zset: member = lease, score = when it lapses)
-- ARGV[1] = the lease member, ARGV[2] = lease TTL (seconds)
-- A lease dropped meanwhile (lapsed during an outage, or freed as a dead process's) is
-- put back: the run holding it is still running, and the limiter must count it.
-- Returns how many leases were put back.
local t = redis.call("TIME")
local expiry = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[2])
local back = 0
for i = 1, #KEYS do
  back = back + redis.call("ZADD", KEYS[i], expiry, ARGV[1])
end
return back
