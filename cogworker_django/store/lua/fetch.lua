-- Reliable fetch: ack the jobs this process's threads just finished, then move up to N
-- jobs, each the first found in the weighted queue order, into this process's
-- in-progress list. One round trip whatever the number of queues, acks and jobs.
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:paused, KEYS[3..m+2] = P:queue:<q> in fetch
-- order, then optionally KEYS[m+3..2m+2] = P:pqueue:<q> in the same order, then for each
-- of R results kept with the acks: P:result:<jid>, P:ended:<jid> (the last 2R keys)
-- ARGV[1] = number of acks A, ARGV[2..A+1] = raw payloads to ack, ARGV[A+2] = R, then R
-- results as lua/include/keep_result.lua reads them (ttl, terminal, n, n pairs), then
-- N (jobs wanted, 0 to only ack), then S (how many of the N are for async jobs: the
-- event loop's free slots; "" when kinds are not told apart), then the async jobs'
-- paths as one string, each between newlines ("\na.b\nc.d\n"), then P (how many
-- plain jobs may be taken beyond the threads' room to reach an async job behind them;
-- "" for none), then the m queue names
-- Returns {queue name, raw payload, queue name, raw payload, ...} (empty when every
-- unpaused queue is empty), then "blocked:a" or "blocked:p" (an odd length) when a queue
-- was left because its next job is of a kind with no room left: "a" when one of them was
-- an async job (a loop slot's), else "p" (a thread's).
--
-- Kinds (with S given): a job is async when its payload's "func" is one of the paths
-- (a plain find of "\n<func>\n" in that string: no table built per call), else plain. At most S async jobs and N - S plain ones are taken: a queue whose next job
-- (its list's tail, LINDEX -1, the job LMOVE takes) is of a kind with no room is left
-- for this call, so a process takes only jobs it can start now, and plain and async jobs
-- on separate queues fill both sides at once (docs/workers.md "Plain and async jobs side
-- by side"). One exception keeps an async job from waiting behind plain ones for a
-- thread: when the loop has room and an async job is among the next P + 1 jobs of a
-- queue, the plain jobs in front of it are taken too (at most P in all), to wait in the
-- process for a thread. A priority zset's member is taken whatever its kind (django.tasks
-- jobs only). Cost: one LINDEX per job taken; one LRANGE of P + 1 jobs when a queue's
-- next job is plain with no thread free and the loop has room.
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
local async_room = tonumber(ARGV[at + 1])
local async_paths = ARGV[at + 2]
local room = async_room and { p = wanted - async_room, a = async_room }
local spare = tonumber(ARGV[at + 3]) or 0
local blocked = false
local first = at + 4
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
local function kind_of(job)
  local func = string.match(job, '"func":"([^"]*)"')
  return (func and string.find(async_paths, "\n" .. func .. "\n", 1, true)) and "a" or "p"
end
-- Whether an async job is among the next `n` + 1 jobs of the list `key`.
local function async_within(key, n)
  local next_jobs = redis.pcall("LRANGE", key, -(n + 1), -1)
  if type(next_jobs) ~= "table" then
    return false
  end
  for j = #next_jobs, 1, -1 do
    if kind_of(next_jobs[j]) == "a" then
      return true
    end
  end
  return false
end
-- Whether the list `key`'s next job can be taken now (room counted down when it can).
local function room_for(key)
  local head = redis.pcall("LINDEX", key, -1)
  if type(head) ~= "string" then
    return true -- empty (or unreadable): LMOVE finds nothing
  end
  local kind = kind_of(head)
  if kind == "p" and room.p < 1 and room.a > 0 and spare > 0 and async_within(key, spare) then
    spare = spare - 1 -- in front of an async job: taken, to wait for a thread
    return true
  end
  if room[kind] < 1 then
    if kind == "a" or not blocked then
      blocked = kind
    end
    return false
  end
  room[kind] = room[kind] - 1
  return true
end
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
      if not room or room_for(KEYS[2 + i]) then
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
      end
      open[i] = false -- empty, unreadable, or its next job has no room: not visited again
    end
  end
  return false
end
for _ = 1, wanted do
  if not take_one() then
    break
  end
end
if blocked then
  taken[#taken + 1] = "blocked:" .. blocked
end
return taken
