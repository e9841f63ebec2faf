-- Take room in a run's limiters, all or nothing: one decision for every limiter the
-- run names (controls/limits.py). Times are Redis's clock (TIME), seconds.
-- KEYS[3i-2] = P:limit:<name>:leases (zset: member = the lease "<token>|<jid>|<job>|<identity>",
--              score = when the lease lapses unless refreshed)
-- KEYS[3i-1] = P:limit:<name>:starts (zset: member = a start's token, score = its time)
-- KEYS[3i]   = P:limit:<name>:offered (zset: jid of a waiting job the waker moved -> when;
--              this run's jid leaves it, taken or refused: it no longer holds room there)
-- ARGV[1] = the lease member, ARGV[2] = the start token, ARGV[3] = lease TTL (seconds),
-- ARGV[4] = the run's jid
-- ARGV[3i+2], ARGV[3i+3], ARGV[3i+4] = limiter i's concurrency, rate, per (0 = none)
-- Returns {1} when taken (a lease in every concurrency limiter, a start in every rate
-- limiter), else {0, i, wait}: limiter i is full; wait (text) is the seconds until its
-- window has room ("0": unknown, a lease must end first). Nothing taken then.
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local n = #KEYS / 3
for i = 1, n do
  redis.call("ZREM", KEYS[3 * i], ARGV[4])
end
for i = 1, n do
  local leases, starts = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local conc = tonumber(ARGV[3 * i + 2])
  local rate = tonumber(ARGV[3 * i + 3])
  local per = tonumber(ARGV[3 * i + 4])
  if conc > 0 then
    redis.call("ZREMRANGEBYSCORE", leases, "-inf", now)
    if redis.call("ZCARD", leases) >= conc then
      return {0, i, "0"}
    end
  end
  if rate > 0 then
    redis.call("ZREMRANGEBYSCORE", starts, "-inf", now - per)
    if redis.call("ZCARD", starts) >= rate then
      local oldest = redis.call("ZRANGE", starts, 0, 0, "WITHSCORES")
      return {0, i, tostring(tonumber(oldest[2]) + per - now)}
    end
  end
end
local ttl = tonumber(ARGV[3])
for i = 1, n do
  local leases, starts = KEYS[3 * i - 2], KEYS[3 * i - 1]
  if tonumber(ARGV[3 * i + 2]) > 0 then
    redis.call("ZADD", leases, now + ttl, ARGV[1])
  end
  local per = tonumber(ARGV[3 * i + 4])
  if tonumber(ARGV[3 * i + 3]) > 0 then
    redis.call("ZADD", starts, now, ARGV[2])
    redis.call("EXPIRE", starts, math.ceil(per) + 1)
  end
end
return {1}
