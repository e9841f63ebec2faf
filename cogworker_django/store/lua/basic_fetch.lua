-- Basic fetch, non-blocking step: take the next job in priority order (priority.py)
-- without an in-progress list. BRPOP can't see the priority zsets, so BasicFetch runs
-- this first and only blocks in BRPOP when it finds nothing. Basic-fetch semantics: a
-- job taken here is out of Redis (lost if its process dies).
-- In the same step, the outcomes the thread's last runs keep (core/results.py): basic
-- fetch has no ack for them to ride with.
-- KEYS[1..m] = P:queue:<q>, KEYS[m+1..2m] = P:pqueue:<q>, both in fetch order, then for
-- each of R results: P:result:<jid>, P:ended:<jid>
-- ARGV[1] = R, then R results as lua/include/keep_result.lua reads them, then the m
-- queue names, in the same order
-- Returns {queue name, raw payload}, or false when every given queue is empty.
-- Per queue: the best zset member if its priority is above 0 (score < 0), else the
-- list's next job, else the best zset member (priority below 0). A key of the wrong
-- type is skipped (pcall): the key guard moves it aside.
--@include keep_result
local results = tonumber(ARGV[1])
local at = 2
local result_keys = #KEYS - 2 * results
for k = 1, results do
  at = keep_result(KEYS[result_keys + 2 * k - 1], KEYS[result_keys + 2 * k], at)
end
local names = {}
for i = at, #ARGV do
  names[#names + 1] = ARGV[i]
end
local m = #names
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
    return take(zkey, best[1], names[i])
  end
  local job = redis.pcall("RPOP", KEYS[i])
  if type(job) == "string" then
    return {names[i], job}
  end
  if best then
    return take(zkey, best[1], names[i])
  end
end
return false
