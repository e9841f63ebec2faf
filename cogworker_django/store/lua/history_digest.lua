-- Digest the history stream newest first, one bounded slice per call: per job its runs,
-- failures, summed duration and a log-scale histogram of durations; per time bucket (by
-- the entry id's time, when the run was written) its runs, failures, summed and largest
-- duration and wait. Only these aggregates travel back, never the runs, and no call
-- holds Redis for more than a slice.
-- KEYS[1] = P:history (stream)
-- ARGV[1] = highest id to read ("+" for the newest), ARGV[2] = lowest id ("-" for all),
-- ARGV[3] = entries to read in this call, ARGV[4] = histogram bins per doubling,
-- ARGV[5] = bucket width in ms, ARGV[6] = epoch ms before which entries get no bucket
-- (they still count for their job)
-- Returns {newest id read, oldest id read ("" and "" when none), entries read,
--   jobs    = {name, runs, failed, duration sum, {bin, count, bin, count, ...}, ...},
--   buckets = {start ms, runs, failed, duration sum, duration max, wait sum, waits,
--              wait max, ...}}
-- Sums and maxima travel as strings (a Lua number in a reply is cut to an integer). A run
-- of zero seconds falls in bin ZERO_BIN; a run without a readable duration only counts.
local entries = redis.call("XREVRANGE", KEYS[1], ARGV[1], ARGV[2], "COUNT", ARGV[3])
local per_doubling = tonumber(ARGV[4])
local width = tonumber(ARGV[5])
local since = tonumber(ARGV[6])
local ZERO_BIN = -100000
local log2 = math.log(2)
local jobs, job_order = {}, {}
local buckets, bucket_order = {}, {}
for _, entry in ipairs(entries) do
  local fields, run = entry[2], ""
  if fields[1] == "run" then
    run = fields[2]
  else
    for i = 3, #fields, 2 do
      if fields[i] == "run" then
        run = fields[i + 1]
      end
    end
  end
  local name = string.match(run, ',"job":"([^"]*)",') or ""
  local failed = string.find(run, ',"status":"failed",', 1, true) and 1 or 0
  local duration = tonumber(string.match(run, ',"duration":([^,}]*)') or "")
  local agg = jobs[name]
  if not agg then
    agg = {0, 0, 0, {}}
    jobs[name] = agg
    job_order[#job_order + 1] = name
  end
  agg[1] = agg[1] + 1
  agg[2] = agg[2] + failed
  if duration then
    agg[3] = agg[3] + duration
    local bin = ZERO_BIN
    if duration > 0 then
      bin = math.floor(math.log(duration) / log2 * per_doubling)
    end
    agg[4][bin] = (agg[4][bin] or 0) + 1
  end
  local ms = tonumber(string.match(entry[1], "^(%d+)"))
  if ms and ms >= since then
    local start = ms - ms % width
    local b = buckets[start]
    if not b then
      b = {0, 0, 0, 0, 0, 0, 0}
      buckets[start] = b
      bucket_order[#bucket_order + 1] = start
    end
    b[1] = b[1] + 1
    b[2] = b[2] + failed
    if duration then
      b[3] = b[3] + duration
      if duration > b[4] then
        b[4] = duration
      end
    end
    local wait = tonumber(string.match(run, ',"wait":([^,}]*)') or "")
    if wait then
      b[5] = b[5] + wait
      b[6] = b[6] + 1
      if wait > b[7] then
        b[7] = wait
      end
    end
  end
end
local out_jobs = {}
for _, name in ipairs(job_order) do
  local agg = jobs[name]
  local bins = {}
  for bin, count in pairs(agg[4]) do
    bins[#bins + 1] = bin
    bins[#bins + 1] = count
  end
  out_jobs[#out_jobs + 1] = name
  out_jobs[#out_jobs + 1] = agg[1]
  out_jobs[#out_jobs + 1] = agg[2]
  out_jobs[#out_jobs + 1] = tostring(agg[3])
  out_jobs[#out_jobs + 1] = bins
end
local out_buckets = {}
for _, start in ipairs(bucket_order) do
  local b = buckets[start]
  out_buckets[#out_buckets + 1] = start
  out_buckets[#out_buckets + 1] = b[1]
  out_buckets[#out_buckets + 1] = b[2]
  out_buckets[#out_buckets + 1] = tostring(b[3])
  out_buckets[#out_buckets + 1] = tostring(b[4])
  out_buckets[#out_buckets + 1] = tostring(b[5])
  out_buckets[#out_buckets + 1] = b[6]
  out_buckets[#out_buckets + 1] = tostring(b[7])
end
local newest, oldest = "", ""
if #entries > 0 then
  newest, oldest = entries[1][1], entries[#entries][1]
end
return {newest, oldest, #entries, out_jobs, out_buckets}
