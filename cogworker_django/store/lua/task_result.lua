-- The result of one django.tasks task: P:result:<id>, a hash (tasks/store.py).
-- KEYS[1] = P:result:<id>, KEYS[2] = P:ended:<id> (optional: an end wakes the callers
-- of JobRef.result() blocked on it, when one registered: core/results.py)
-- ARGV[1] = mode: "create" (the enqueuer), "start" or "end" (a worker's run)
-- ARGV[2] = TTL in seconds, set again by every write
-- ARGV[3] = token of this run ("" for create)
-- ARGV[4] = this worker's id as a JSON string, appended to worker_ids by the write that
--           counts a run ("" for none)
-- ARGV[5] = one error as a JSON object to append to errors ("" for none)
-- ARGV[6] = B, then B field/value pairs written only where absent (HSETNX: they rebuild
--           a result that expired or whose earlier writes failed), then field/value
--           pairs always written (HSET)
-- Returns 0 when nothing was written; else 1, or for "start" the hash after the write.
-- The JSON lists (worker_ids, errors) are appended as text: items are built in Python
-- (rule 3), never decoded and re-encoded here.
-- Ordering: a run's writes carry its token. "start" sets run_token; a retried write
-- whose first try landed (a lost reply, rule 11) finds its own token and does nothing.
-- An "end" whose run is not the current one either counts a run whose "start" never
-- landed (the current run has ended, or there is none), or is a late write of an older
-- run while a newer one goes on: then it only adds its error, never its status.
local key, mode, token = KEYS[1], ARGV[1], ARGV[3]
if mode == "create" then
  if redis.call("EXISTS", key) == 1 then
    return 0 -- a worker wrote first: its state is newer
  end
elseif mode == "start" then
  if redis.call("HGET", key, "run_token") == token then
    return 0
  end
elseif redis.call("HGET", key, "end_token") == token then
  return 0
end

local function append(field, item)
  local current = redis.call("HGET", key, field)
  if not current or current == "" or current == "[]" then
    redis.call("HSET", key, field, "[" .. item .. "]")
  else
    redis.call("HSET", key, field, string.sub(current, 1, -2) .. "," .. item .. "]")
  end
end

local i = 7
for _ = 1, tonumber(ARGV[6]) do
  redis.call("HSETNX", key, ARGV[i], ARGV[i + 1])
  i = i + 2
end

local function count_run()
  if ARGV[4] ~= "" then
    append("worker_ids", ARGV[4])
  end
  redis.call("HSET", key, "run_token", token)
end

local apply = true
if mode == "start" then
  count_run()
elseif mode == "end" then
  local current = redis.call("HGET", key, "run_token")
  if current ~= token then
    if current and current ~= redis.call("HGET", key, "end_token") then
      apply = false
    else
      count_run()
    end
  end
  redis.call("HSET", key, "end_token", token)
end
if ARGV[5] ~= "" then
  append("errors", ARGV[5])
end
if apply then
  while i < #ARGV do
    redis.call("HSET", key, ARGV[i], ARGV[i + 1])
    i = i + 2
  end
end
redis.call("EXPIRE", key, ARGV[2])
if mode == "start" then
  return redis.call("HGETALL", key)
end
local status = redis.call("HGET", key, "status")
if KEYS[2] and (status == "SUCCESSFUL" or status == "FAILED")
  and redis.call("HEXISTS", key, "waiting") == 1 then
  redis.call("RPUSH", KEYS[2], "1")
  redis.call("EXPIRE", KEYS[2], ARGV[2])
end
return 1
