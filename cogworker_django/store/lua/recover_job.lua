-- Orphan recovery of one job: move it from a dead process's in-progress list to its
-- queue (or to dead past MAX_ORPHANINGS) only if it is still on that list, so two
-- recoverers never both requeue it; adding before removing (rule 2).
-- KEYS[1] = P:inprogress:<dead id>, KEYS[2] = target (queue list or dead zset),
-- KEYS[3] = P:queues (left out with a home per queue: another slot; the push listed it)
-- ARGV[1] = raw payload on the list, ARGV[2] = new payload JSON, ARGV[3] = queue name,
-- ARGV[4] = score when the target is the dead zset ("" to push on a queue)
-- Returns 1 if moved, 0 if another recoverer (or the owner) took it first.
--@include place
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
place("RPUSH", KEYS[2], ARGV[2], ARGV[4], KEYS[3], ARGV[3])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
