-- File a finished job in a sorted set (retry, dead or schedule) and ack it, adding
-- before removing (rule 2). For the dead set, trim it by age and count.
-- KEYS[1] = P:inprogress:<id> (or "" for basic fetch: nothing to ack), KEYS[2] = target zset
-- ARGV[1] = raw payload as fetched (to ack), ARGV[2] = score, ARGV[3] = new payload JSON,
-- ARGV[4] = "dead" to trim, else "", ARGV[5] = drop scores below this, ARGV[6] = keep at most
-- Returns 1.
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
if KEYS[1] ~= "" then
  redis.call("LREM", KEYS[1], 1, ARGV[1])
end
if ARGV[4] == "dead" then
  redis.pcall("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[5])
  local keep = tonumber(ARGV[6])
  redis.pcall("ZREMRANGEBYRANK", KEYS[2], 0, -(keep + 1))
end
return 1
