-- Included by the scripts that put a job where it waits (scripts.py: an include
-- directive line): requeue_due, recover_job, unique_push, outbox_relay, periodic_push,
-- batch_push, batch_update.
-- place(push, target, value, score, listing, queue): with score "" the job goes onto the
-- list `target` by `push` ("LPUSH": the end taken last, "RPUSH": the end taken next) and,
-- when `listing` (P:queues) is given, its queue is listed (pcall: a listing of the
-- wrong type never fails the push, rule 1); else into the zset `target` (a priority zset,
-- the schedule, dead) by `score`.
local function place(push, target, value, score, listing, queue)
  if score == "" then
    redis.call(push, target, value)
    if listing then
      redis.pcall("SADD", listing, queue)
    end
  else
    redis.call("ZADD", target, score, value)
  end
end
