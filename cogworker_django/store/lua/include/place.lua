-- Included by the scripts that put a job where it waits (scripts.py: an include
-- directive line): requeue_due, recover_job, unique_push, outbox_relay, periodic_push,
-- batch_push, batch_update, settle, file_unsettled.
-- place(push, target, value, score, listing, queue, bell): with score "" the job goes
-- onto the list `target` by `push` ("LPUSH": the end taken last, "RPUSH": the end taken
-- next) and, when `listing` (P:queues) is given, its queue is listed (pcall: a listing of
-- the wrong type never fails the push, rule 1); else into the zset `target` (a priority
-- zset, the schedule, dead) by `score`.
-- `bell` (optional, P:bell:<q>, store/bell.py): rung when the push found the list empty,
-- so that an idle worker waiting on it fetches at once: a token LPUSHed, the bell trimmed
-- to 16 (pcall: a bell of the wrong type never fails the push; the idle workers'
-- timeout finds the job). Returns the list's length after a list push (1: it was
-- empty), else 0.
local function place(push, target, value, score, listing, queue, bell)
  if score == "" then
    local length = redis.call(push, target, value)
    if listing then
      redis.pcall("SADD", listing, queue)
    end
    if bell and length == 1 then
      redis.pcall("LPUSH", bell, "1")
      redis.pcall("LTRIM", bell, 0, 15)
    end
    return length
  end
  redis.call("ZADD", target, score, value)
  return 0
end
