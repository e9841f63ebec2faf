-- Before a claimed slot's job takes a push path that cannot remove its claim record in
-- the same step (a batch member's count, a test-mode sink, a scheduled push), mark the
-- record "pushing": whoever marks it pushes; a record found marked is never pushed
-- again (its push may have happened), so the slot fires at most once.
-- KEYS[1] = P:periodic:claims:<identity> (hash: claims not yet pushed)
-- ARGV[1] = the claim's field ("<slot>:<name>"), ARGV[2] = the claim's jid
-- Returns 1 when marked (push now), 0 when the record is gone, is not this claim's or
-- is already marked (do not push), 2 when the hash can't be read (wrong type: push, as
-- without a record).
local record = redis.pcall("HGET", KEYS[1], ARGV[1])
if type(record) == "table" and record.err then
  return 2
end
if not record or string.sub(record, 1, #ARGV[2] + 3) ~= "c " .. ARGV[2] .. " " then
  return 0
end
redis.call("HSET", KEYS[1], ARGV[1], "p " .. ARGV[2])
return 1
