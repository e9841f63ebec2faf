-- File a finished job in a sorted set (retry, dead or schedule) and ack it, adding
-- before removing (rule 2). For the dead set, trim it by age and count. In the same step,
-- the run's kept result (core/results.py), and for a job that ends in dead its on_dead
-- job (retry control: pushed exactly when the job is filed, never twice).
-- KEYS[1] = P:inprogress:<id> (or "" for basic fetch: nothing to ack), KEYS[2] = target zset,
-- then P:result:<jid>, P:ended:<jid> when a result is kept, then the on_dead job's target
-- (its queue's list, its priority zset or the schedule) and, when the push lists its
-- queue here, P:queues
-- ARGV[1] = raw payload as fetched (to ack), ARGV[2] = score, ARGV[3] = new payload JSON,
-- ARGV[4] = "dead" to trim, else "", ARGV[5] = drop scores below this, ARGV[6] = keep at most,
-- ARGV[7] = R (1 when a result is kept, else 0), then the result as
-- lua/include/keep_result.lua reads it; then C (1 when an on_dead job is pushed, else 0),
-- then its payload, score ("" onto the list) and queue name
-- Returns 1.
--@include keep_result
--@include place
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
if KEYS[1] ~= "" then
  redis.call("LREM", KEYS[1], 1, ARGV[1])
end
if ARGV[4] == "dead" then
  redis.pcall("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[5])
  local keep = tonumber(ARGV[6])
  redis.pcall("ZREMRANGEBYRANK", KEYS[2], 0, -(keep + 1))
end
local at = 8
local next_key = 3
if ARGV[7] == "1" then
  at = keep_result(KEYS[3], KEYS[4], at)
  next_key = 5
end
if ARGV[at] == "1" then
  place("LPUSH", KEYS[next_key], ARGV[at + 1], ARGV[at + 2], KEYS[next_key + 1], ARGV[at + 3])
end
return 1
