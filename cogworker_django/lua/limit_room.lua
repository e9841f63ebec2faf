-- How much room each limiter has now, and the oldest of its waiting jobs that fit in it
-- (the limiter waker: worker/limit_waker.py). Reads only. Times are Redis's clock.
-- KEYS[3i-2] = P:limit:<name>:leases  (zset: lease -> when it lapses)
-- KEYS[3i-1] = P:limit:<name>:starts  (zset: start token -> its time)
-- KEYS[3i]   = P:limit:<name>:waiting (zset: a waiting job's scheduled payload -> when parked)
-- ARGV[1] = the most waiting jobs returned per limiter
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1] = limiter i's concurrency, rate, per (0 = none)
-- Returns per limiter {waiting, wait, members}: how many wait; the seconds (text) until
-- its rate window has room ("0": it has room now, or no rate); and the oldest waiting
-- payloads, as many as there is room for now (none while it is full).
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local most = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 3 do
  local leases, starts, waiting = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local conc = tonumber(ARGV[3 * i - 1])
  local rate = tonumber(ARGV[3 * i])
  local per = tonumber(ARGV[3 * i + 1])
  local count = redis.call("ZCARD", waiting)
  local room = most
  local wait = 0
  if conc > 0 then
    room = math.min(room, conc - redis.call("ZCOUNT", leases, "(" .. now, "+inf"))
  end
  if rate > 0 then
    local since = "(" .. (now - per)
    local free = rate - redis.call("ZCOUNT", starts, since, "+inf")
    if free <= 0 then
      local oldest = redis.call("ZRANGEBYSCORE", starts, since, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      if oldest[2] then
        wait = math.max(tonumber(oldest[2]) + per - now, 0.001)
      end
    end
    room = math.min(room, free)
  end
  local members = {}
  if count > 0 and room > 0 then
    members = redis.call("ZRANGE", waiting, 0, room - 1)
  end
  out[i] = {count, tostring(wait), members}
end
return out
