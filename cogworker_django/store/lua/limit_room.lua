-- How much room each limiter has now, and the oldest of its waiting jobs that fit in it
-- (the limiter waker: worker/limit_waker.py). Times are Redis's clock.
-- KEYS[4i-3] = P:limit:<name>:leases  (zset: lease -> when it lapses)
-- KEYS[4i-2] = P:limit:<name>:starts  (zset: start token -> its time)
-- KEYS[4i-1] = P:limit:<name>:waiting (zset: a waiting job's scheduled payload -> when parked)
-- KEYS[4i]   = P:limit:<name>:offered (zset: jid of a waiting job returned here -> when)
-- ARGV[1] = the most waiting jobs returned per limiter
-- ARGV[2] = seconds a returned job holds its room while it has neither taken a lease nor
--           been refused (lua/limit_take.lua removes it then): the waker moves it to its
--           queue, where it may wait behind other jobs; until it is fetched the room it
--           will take is not offered again (else a backed-up queue would draw the whole
--           waiting set into it, to be refused and parked again)
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2] = limiter i's concurrency, rate, per (0 = none)
-- Returns per limiter {waiting, wait, members}: how many wait; the seconds (text) until
-- its rate window has room ("0": it has room now, or no rate); and the oldest waiting
-- payloads, as many as there is room for now (none while it is full), each now offered.
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local most = tonumber(ARGV[1])
local hold = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS / 4 do
  local leases, starts, waiting, offered = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local conc = tonumber(ARGV[3 * i])
  local rate = tonumber(ARGV[3 * i + 1])
  local per = tonumber(ARGV[3 * i + 2])
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
  redis.call("ZREMRANGEBYSCORE", offered, "-inf", now - hold)
  room = room - redis.call("ZCARD", offered)
  local members = {}
  if count > 0 and room > 0 then
    members = redis.call("ZRANGE", waiting, 0, room - 1)
    for _, member in ipairs(members) do
      local ok, job = pcall(cjson.decode, member)
      if ok and type(job) == "table" and type(job.jid) == "string" then
        redis.call("ZADD", offered, now, job.jid)
      end
    end
    redis.call("EXPIRE", offered, math.ceil(hold) + 1)
  end
  out[i] = {count, tostring(wait), members}
end
return out
