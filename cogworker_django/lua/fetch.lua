-- Reliable fetch: ack the job this thread just finished, then move the first job found
-- in the weighted queue order into this process's in-progress list. One round trip.
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:paused, KEYS[3..m+2] = P:queue:<q> in fetch
-- order, then optionally KEYS[m+3..2m+2] = P:pqueue:<q> in the same order
-- ARGV[1] = raw payload to ack ("" for none), ARGV[2..m+1] = the queue names
-- Returns {queue name, raw payload}, or false when every unpaused queue is empty.
-- A paused set or a queue of the wrong type is skipped (pcall): the key guard moves it
-- aside, and one bad key must not stop fetching from the others.
--
-- Priorities (django.tasks; see priority.py), when the P:pqueue keys are given: per
-- queue, take the best zset member if its priority is above 0 (score < 0), else the
-- list's next job, else the best zset member (priority below 0). A member is
-- "<stamp>|<payload>": the stamp is dropped and the bare payload goes to the in-progress
-- list, added before it is removed (rule 2). Cost, in this same script (no extra round
-- trip): one EXISTS over every zset, and only when one exists a ZRANGE per queue visited.
if ARGV[1] ~= "" then
  redis.call("LREM", KEYS[1], 1, ARGV[1])
end
local m = #ARGV - 1
local with_priority = #KEYS == 2 + 2 * m
  and redis.call("EXISTS", unpack(KEYS, 3 + m, 2 + 2 * m)) > 0
local function take(zkey, member, name)
  local job = string.sub(member, string.find(member, "|", 1, true) + 1)
  redis.call("LPUSH", KEYS[1], job)
  redis.call("ZREM", zkey, member)
  return {name, job}
end
for i = 1, m do
  local name = ARGV[i + 1]
  local paused = redis.pcall("SISMEMBER", KEYS[2], name)
  if paused ~= 1 then
    local zkey, best = KEYS[2 + m + i], nil
    if with_priority then
      best = redis.pcall("ZRANGE", zkey, 0, 0, "WITHSCORES")
      if type(best) ~= "table" or #best < 2 or not string.find(best[1], "|", 1, true) then
        best = nil
      end
    end
    if best and tonumber(best[2]) < 0 then
      return take(zkey, best[1], name)
    end
    local job = redis.pcall("LMOVE", KEYS[2 + i], KEYS[1], "RIGHT", "LEFT")
    if type(job) == "string" then
      return {name, job}
    end
    if best then
      return take(zkey, best[1], name)
    end
  end
end
return false
