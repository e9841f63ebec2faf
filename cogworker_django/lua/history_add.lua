-- Append run records to the capped history stream: one call per batch of runs, never
-- one round trip per run (docs/internals.md). The records are built in Python (rule 3).
-- KEYS[1] = P:history (stream)
-- ARGV[1] = HISTORY_MAX_RUNS (an approximate cap: MAXLEN ~), ARGV[2..] = one run each, JSON
-- Returns how many runs were added. A key of the wrong type fails the first XADD, so a
-- failed call added nothing.
for i = 2, #ARGV do
  redis.call("XADD", KEYS[1], "MAXLEN", "~", ARGV[1], "*", "run", ARGV[i])
end
return #ARGV - 1
