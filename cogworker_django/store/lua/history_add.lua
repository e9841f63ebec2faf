-- Append run records to the capped history stream: one call per batch of runs, never
-- one round trip per run (docs/internals.md). The records are built in Python (rule 3).
-- KEYS[1] = P:history (stream)
-- ARGV[1] = HISTORY_MAX_RUNS (an approximate cap: MAXLEN ~)
-- ARGV[2..] = the runs, one JSON record a line ("\n" between them; JSON text holds no raw
--   line break); the writer sends one argument per batch. (Each process runs the script
--   of its own release, by its SHA: no other caller.)
-- Returns how many runs were added. A key of the wrong type fails the first XADD, so a
-- failed call added nothing.
local added = 0
for i = 2, #ARGV do
  local records, from = ARGV[i], 1
  while true do
    local stop = string.find(records, "\n", from, true)
    local record = string.sub(records, from, stop and stop - 1 or -1)
    redis.call("XADD", KEYS[1], "MAXLEN", "~", ARGV[1], "*", "run", record)
    added = added + 1
    if not stop then
      break
    end
    from = stop + 1
  end
end
return added
