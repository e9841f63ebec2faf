-- Push a claimed slot's job and remove its claim record, in one step: the record is
-- there exactly while the job is not, so whoever pushes from the record (the claimer,
-- or orphan recovery once the claimer is dead) pushes it at most once, and a claim
-- whose push reply was lost is told apart from one never pushed.
-- KEYS[1] = P:periodic:claims:<identity> (hash: claims not yet pushed),
-- KEYS[2] = where the job waits: P:queue:<queue> (list) or P:pqueue:<queue> (a
-- django.tasks priority's zset), KEYS[3] = P:queues (set: the queue listing)
-- ARGV[1] = the claim's field ("<slot>:<name>"), ARGV[2] = the claim's jid,
-- ARGV[3] = what is written (the payload JSON, or the zset member carrying it; built in
-- Python: rule 3), ARGV[4] = queue name, ARGV[5] = zset score ("" to LPUSH on the list),
-- ARGV[6] (optional) = the index in KEYS of the queue's doorbell (P:bell:<queue>, rung
-- when the push found the list empty: include/place.lua)
-- Returns 1 when pushed; 0 when the record is gone or is not this claim's (pushed
-- already, or taken over by recovery): nothing is written. A claims hash of the wrong
-- type pushes anyway (2): only the claimer meets that, right after claiming the slot.
--@include place
local record = redis.pcall("HGET", KEYS[1], ARGV[1])
local pushed = 1
if type(record) == "table" and record.err then
  pushed = 2
elseif not record or string.sub(record, 1, #ARGV[2] + 3) ~= "c " .. ARGV[2] .. " " then
  return 0
end
place("LPUSH", KEYS[2], ARGV[3], ARGV[5], nil, nil, ARGV[6] and KEYS[tonumber(ARGV[6])])
if pushed == 1 then
  redis.call("HDEL", KEYS[1], ARGV[1])
end
-- The listing is best-effort (rule 1): a set of the wrong type must not undo the push.
redis.pcall("SADD", KEYS[3], ARGV[4])
return pushed
