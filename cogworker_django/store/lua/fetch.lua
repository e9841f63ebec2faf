-- Reliable fetch: ack the jobs this process's threads just finished, then move up to N
-- jobs, each the first found in the weighted queue order, into this process's
-- in-progress list. One round trip whatever the number of queues, acks and jobs.
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:paused, KEYS[3..m+2] = P:queue:<q> in fetch
-- order, then optionally KEYS[m+3..2m+2] = P:pqueue:<q> in the same order, then for each
-- of R results kept with the acks: P:result:<jid>, P:ended:<jid> (the last 2R keys)
-- ARGV[1] = number of acks A, ARGV[2..A+1] = raw payloads to ack, ARGV[A+2] = R, then R
-- results as lua/include/keep_result.lua reads them (ttl, terminal, n, n pairs), then
-- N (jobs wanted, 0 to only ack), then the m queue names
-- Returns {queue name, raw payload, queue name, raw payload, ...} (empty when every
-- unpaused queue is empty).
-- A paused set or a queue of the wrong type is skipped (pcall): the key guard moves it
-- aside, and one bad key must not stop fetching from the others.
--
-- Priorities (django.tasks; see priority.py), when the P:pqueue keys are given: per
-- queue, take the best zset member if its priority is above 0 (score < 0), else the
-- list's next job, else the best zset member (priority below 0). A member is
-- "<stamp>|<payload>": the stamp is dropped and the bare payload goes to the in-progress
-- list, added before it is removed (rule 2). Cost, in this same script (no extra round
-- trip): one EXISTS over every zset, and only when one exists a ZRANGE per queue visited.
--@include keep_result
local acks = tonumber(ARGV[1])
for i = 2, acks + 1 do
  redis.call("LREM", KEYS[1], 1, ARGV[i])
end
-- The acked runs' results, in the same step as their acks (core/results.py).
local results = tonumber(ARGV[acks + 2])
local at = acks + 3
local result_keys = #KEYS - 2 * results
for k = 1, results do
  at = keep_result(KEYS[result_keys + 2 * k - 1], KEYS[result_keys + 2 * k], at)
end
local wanted = tonumber(ARGV[at])
local first = at + 1
local m = #ARGV - first + 1
local taken = {}
if wanted < 1 or m < 1 then
  return taken
end
local with_priority = result_keys == 2 + 2 * m
  and redis.call("EXISTS", unpack(KEYS, 3 + m, 2 + 2 * m)) > 0
local open = {}
for i = 1, m do
  open[i] = redis.pcall("SISMEMBER", KEYS[2], ARGV[first + i - 1]) ~= 1
end
--@include best_priority
local function take(zkey, member, name)
  local job = string.sub(member, string.find(member, "|", 1, true) + 1)
  redis.call("LPUSH", KEYS[1], job)
  redis.call("ZREM", zkey, member)
  taken[#taken + 1] = name
  taken[#taken + 1] = job
end
-- One job from the first queue in the order that has one; false when none has.
local function take_one()
  for i = 1, m do
    if open[i] then
      local name = ARGV[first + i - 1]
      local zkey, best = KEYS[2 + m + i], nil
      if with_priority then
        best = best_priority(zkey)
      end
      if best and tonumber(best[2]) < 0 then
        take(zkey, best[1], name)
        return true
      end
      local job = redis.pcall("LMOVE", KEYS[2 + i], KEYS[1], "RIGHT", "LEFT")
      if type(job) == "string" then
        taken[#taken + 1] = name
        taken[#taken + 1] = job
        return true
      end
      if best then
        take(zkey, best[1], name)
        return true
      end
      open[i] = false -- empty (or unreadable): not visited again in this call
    end
  end
  return false
end
for _ = 1, wanted do
  if not take_one() then
    break
  end
end
return taken
