-- Shutdown settlement of one process's in-progress list, in one atomic step: drop the
-- jobs that only waited for their ack, requeue the unfinished ones (to the end their
-- queue is taken from, so they run next), hand over finished-but-unfiled ones to
-- P:unsettled; whatever is not named stays for orphan recovery.
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:unsettled, KEYS[3..n] = P:queue:<q> per requeued job
-- ARGV[1] = number of acks A, ARGV[2..A+1] = raw payloads to ack,
-- ARGV[A+2] = number of hand-overs H, then H pairs (raw payload, unsettled entry JSON),
-- then one raw payload per requeued job, in the order of KEYS[3..n]
-- Returns {acked, handed over, requeued}.
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
for k = 3, #KEYS do
  if redis.call("LPOS", KEYS[1], ARGV[i]) then
    redis.call("RPUSH", KEYS[k], ARGV[i])
    redis.call("LREM", KEYS[1], 1, ARGV[i])
    requeued = requeued + 1
  end
  i = i + 1
end
return {acked, handed, requeued}
