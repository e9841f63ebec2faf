-- Read the history stream newest first, one bounded slice per call, keeping only the runs
-- that match: a filtered admin page or a summary never ships every run to the client,
-- and no call holds Redis for more than a slice.
-- KEYS[1] = P:history (stream)
-- ARGV[1] = highest id to read ("+" for the newest), ARGV[2] = lowest id ("-" for all),
-- ARGV[3] = entries to read in this call, ARGV[4] = job needle ("" for any),
-- ARGV[5] = status needle ("" for any), ARGV[6] = "runs" or "stats"
-- A needle is an exact piece of a run's JSON, built in Python (',"job":"app.jobs.f",'):
-- inside a JSON string a quote is escaped, so it can only match the field itself.
-- Returns {id of the last entry read, or "" when nothing older is left in range, items,
-- runs matched, of which failed}, items = {id, run JSON, ...} ("runs") or the matched
-- runs' durations as written ("stats"; a run without a readable one is only counted).
local entries = redis.call("XREVRANGE", KEYS[1], ARGV[1], ARGV[2], "COUNT", ARGV[3])
local job, status, stats = ARGV[4], ARGV[5], ARGV[6] == "stats"
local items, matched, failed = {}, 0, 0
for _, entry in ipairs(entries) do
  local fields, run = entry[2], ""
  for i = 1, #fields, 2 do
    if fields[i] == "run" then
      run = fields[i + 1]
    end
  end
  if (job == "" or string.find(run, job, 1, true))
      and (status == "" or string.find(run, status, 1, true)) then
    matched = matched + 1
    if string.find(run, ',"status":"failed",', 1, true)
        or string.find(run, ',"status":"timeout",', 1, true) then
      failed = failed + 1
    end
    if stats then
      local duration = string.match(run, ',"duration":([^,}]*)')
      if duration and tonumber(duration) then
        items[#items + 1] = duration
      end
    else
      items[#items + 1] = entry[1]
      items[#items + 1] = run
    end
  end
end
local last = ""
if #entries == tonumber(ARGV[3]) then
  last = entries[#entries][1]
end
return {last, items, matched, failed}
