-- Included by requeue_due.lua and recover_job.lua (scripts.py: an include directive line).
-- place(push, target, value, queue, score): put a job where it goes. With score "" it
-- goes onto a queue's list by `push` (LPUSH: the end taken last; RPUSH: the end taken
-- next), and its queue is listed in KEYS[3] when the caller gave that key (left out with
-- a home per queue: another slot); else into the zset `target` (a priority zset or dead)
-- by `score`.
local function place(push, target, value, queue, score)
  if score == "" then
    redis.call(push, target, value)
    if KEYS[3] then
      redis.pcall("SADD", KEYS[3], queue)
    end
  else
    redis.call("ZADD", target, score, value)
  end
end
