-- Mark a run's concurrency leases as held by an abandoned run (the watchdog gave up on
-- its thread, stuck where no exception reaches): each lease is renamed, keeping it
-- counted, so the limiter's readers can tell it apart. It is released when the body
-- returns, freed with its dead process, or lapses like any other lease.
-- KEYS[i] = P:limit:<name>:leases (zset: member = lease, score = when it lapses)
-- ARGV[1] = the lease member, ARGV[2] = its new member ("abandoned." .. ARGV[1]),
-- ARGV[3] = lease TTL (seconds)
-- A lease dropped meanwhile is put back, as a refresh would: its body still runs.
-- Returns how many leases were renamed.
local t = redis.call("TIME")
local expiry = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3])
local renamed = 0
for i = 1, #KEYS do
  renamed = renamed + redis.call("ZREM", KEYS[i], ARGV[1])
  redis.call("ZADD", KEYS[i], expiry, ARGV[2])
end
return renamed
