-- Reliable fetch: ack the job this thread just finished, then move the first job found
-- in the weighted queue order into this process's in-progress list. One round trip.
-- KEYS[1] = P:inprogress:<id>, KEYS[2] = P:paused, KEYS[3..n] = P:queue:<q> in fetch order
-- ARGV[1] = raw payload to ack ("" for none), ARGV[2..] = the queue names of KEYS[3..n]
-- Returns {queue name, raw payload}, or false when every unpaused queue is empty.
-- A paused set or a queue of the wrong type is skipped (pcall): the key guard moves it
-- aside, and one bad key must not stop fetching from the others.
if ARGV[1] ~= "" then
  redis.call("LREM", KEYS[1], 1, ARGV[1])
end
for i = 3, #KEYS do
  local name = ARGV[i - 1]
  local paused = redis.pcall("SISMEMBER", KEYS[2], name)
  if paused ~= 1 then
    local job = redis.pcall("LMOVE", KEYS[i], KEYS[1], "RIGHT", "LEFT")
    if type(job) == "string" then
      return {name, job}
    end
  end
end
return false
