-- Included by the scripts that settle a run (fetch.lua with its ack, settle.lua with its
-- filing, result_end.lua alone): the run's outcome kept for its result_ttl
-- (core/results.py), in the round trip that settles it.
-- keep_result(key, ended, i): KEYS `key` = P:result:<jid>, `ended` = P:ended:<jid>; the
-- write is read from ARGV[i..]: ttl (seconds; 0 deletes what the run's progress wrote),
-- terminal ("1": the run ended, so the callers of result() blocked on `ended` are woken,
-- if any registered), n, then n field/value pairs. Returns the ARGV index after it.
-- pcall throughout: a result key of the wrong type never fails the settlement it rides
-- with (rule 4); the key guard moves it aside.
local function keep_result(key, ended, i)
  local ttl = tonumber(ARGV[i])
  local terminal = ARGV[i + 1] == "1"
  local n = tonumber(ARGV[i + 2])
  local first = i + 3
  local after = first + 2 * n
  if ttl <= 0 then
    redis.pcall("DEL", key)
    return after
  end
  if n > 0 then
    redis.pcall("HSET", key, unpack(ARGV, first, after - 1))
  end
  redis.pcall("EXPIRE", key, ttl)
  if terminal and redis.pcall("HEXISTS", key, "waiting") == 1 then
    -- Every blocked caller is served: each moves the entry back (BLMOVE to itself).
    redis.pcall("RPUSH", ended, "1")
    redis.pcall("EXPIRE", ended, ttl)
  end
  return after
end
