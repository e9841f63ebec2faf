-- Shutdown settlement of one process's in-progress list, in one atomic step: drop the
-- jobs that only waited for their ack, requeue the unfinished ones (to the end their
-- queue is taken from, so they run next), hand over finished-but-unfiled ones to
-- P:unsettled; whatever is not named stays for orphan recovery.
-- A job that was running is requeued as a new payload (its orphan_count one higher,
-- built in Python: rule 3), or filed in dead past MAX_ORPHANINGS: its target is then
-- P:dead and its score the time (worker/requeue.py, HandedBack).
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:unsettled,
-- KEYS[3..n] = per requeued job, its target: P:queue:<q> (or the priority zset's return
-- key) to RPUSH onto, or P:dead to ZADD to
-- ARGV[1] = number of acks A, ARGV[2..A+1] = raw payloads to ack,
-- ARGV[A+2] = number of hand-overs H, then H pairs (raw payload, unsettled entry JSON),
-- then per requeued job, in the order of KEYS[3..n], a triple (raw payload on the list,
-- payload to write, score: "" to RPUSH, else the ZADD score)
-- Returns {acked, handed over, requeued, {1 or 0 per requeued job: moved}}.
local acks = tonumber(ARGV[1])
local i = 2
local acked, handed, requeued = 0, 0, 0
for _ = 1, acks do
  acked = acked + redis.call("LREM", KEYS[1], 1, ARGV[i])
  i = i + 1
end
local handovers = tonumber(ARGV[i])
i = i + 1
for _ = 1, handovers do
  if redis.call("LPOS", KEYS[1], ARGV[i]) then
    redis.call("RPUSH", KEYS[2], ARGV[i + 1])
    redis.call("LREM", KEYS[1], 1, ARGV[i])
    handed = handed + 1
  end
  i = i + 2
end
local moved = {}
for k = 3, #KEYS do
  if redis.call("LPOS", KEYS[1], ARGV[i]) then
    if ARGV[i + 2] == "" then
      redis.call("RPUSH", KEYS[k], ARGV[i + 1])
    else
      redis.call("ZADD", KEYS[k], ARGV[i + 2], ARGV[i + 1])
    end
    redis.call("LREM", KEYS[1], 1, ARGV[i])
    requeued = requeued + 1
    moved[#moved + 1] = 1
  else
    moved[#moved + 1] = 0
  end
  i = i + 3
end
return {acked, handed, requeued, moved}
