-- Basic fetch, non-blocking step: take the next job in priority order (priority.py)
-- without an in-progress list. BRPOP can't see the priority zsets, so BasicFetch runs
-- this first and only blocks in BRPOP when it finds nothing. Basic-fetch semantics: a
-- job taken here is out of Redis (lost if its process dies).
-- KEYS[1..m] = P:queue:<q>, KEYS[m+1..2m] = P:pqueue:<q>, both in fetch order (m = #ARGV)
-- ARGV[1..m] = the queue names, in the same order
-- Returns {queue name, raw payload}, or false when every given queue is empty.
-- Per queue: the best zset member if its priority is above 0 (score < 0), else the
-- list's next job, else the best zset member (priority below 0). A key of the wrong
-- type is skipped (pcall): the key guard moves it aside.
local m = #ARGV
-- No zset at all (every queue without priorities): one EXISTS instead of m ZRANGEs.
local with_priority = redis.call("EXISTS", unpack(KEYS, m + 1, 2 * m)) > 0
--@include best_priority
local function take(zkey, member, name)
  local sep = string.find(member, "|", 1, true)
  redis.call("ZREM", zkey, member)
  return {name, string.sub(member, sep + 1)}
end
for i = 1, m do
  local zkey, best = KEYS[m + i], nil
  if with_priority then
    best = best_priority(zkey)
  end
  if best and tonumber(best[2]) < 0 then
    return take(zkey, best[1], ARGV[i])
  end
  local job = redis.pcall("RPOP", KEYS[i])
  if type(job) == "string" then
    return {ARGV[i], job}
  end
  if best then
    return take(zkey, best[1], ARGV[i])
  end
end
return false
