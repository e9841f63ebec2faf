-- Included by fetch.lua and basic_fetch.lua (scripts.py: an include directive line).
-- best_priority(zkey): the best member of a queue's priority zset as {member, score}
-- (ZRANGE 0 0 WITHSCORES), or nil when it has none, holds something that is not a
-- "<stamp>|<payload>" member, or is a key of the wrong type (pcall: the key guard moves
-- it aside). The caller takes it when its score is below 0 (a priority above 0), else
-- after the queue's list.
local function best_priority(zkey)
  local best = redis.pcall("ZRANGE", zkey, 0, 0, "WITHSCORES")
  if type(best) ~= "table" or #best < 2 or not string.find(best[1], "|", 1, true) then
    return nil
  end
  return best
end
