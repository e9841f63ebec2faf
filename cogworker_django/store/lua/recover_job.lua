-- Orphan recovery of one job: move it from a dead process's in-progress list to its
-- queue (or to dead past MAX_ORPHANINGS) only if it is still on that list, so two
-- recoverers never both requeue it; adding before removing (rule 2).
-- KEYS[1] = P:inprogress:<dead id>, KEYS[2] = target (queue list or dead zset),
-- KEYS[3] = P:queues (left out with a home per queue: another slot; the push listed it)
-- then, for a job filed in dead whose job has an on_dead job (retry control: pushed in
-- the same step), that job's target (its queue's list or the schedule) and maybe
-- P:queues, from KEYS[ARGV[5]] on
-- ARGV[1] = raw payload on the list, ARGV[2] = new payload JSON, ARGV[3] = queue name,
-- ARGV[4] = score when the target is the dead zset ("" to push on a queue), then for an
-- on_dead job: ARGV[5] = the index of its first key, "1", its payload, score ("" onto the
-- list) and queue name
-- Returns 1 if moved, 0 if another recoverer (or the owner) took it first.
--@include place
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local listing = nil
if #KEYS >= 3 and (not ARGV[5] or tonumber(ARGV[5]) > 3) then
  listing = KEYS[3]
end
place("RPUSH", KEYS[2], ARGV[2], ARGV[4], listing, ARGV[3])
redis.call("LREM", KEYS[1], 1, ARGV[1])
if ARGV[5] then
  local k = tonumber(ARGV[5])
  place("LPUSH", KEYS[k], ARGV[7], ARGV[8], KEYS[k + 1], ARGV[9])
end
return 1
