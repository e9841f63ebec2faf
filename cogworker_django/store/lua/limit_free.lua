-- Free every concurrency lease held by one process (orphan recovery found it dead).
-- KEYS[i] = P:limit:<name>:leases (zset: member = "<token>|<jid>|<job>|<identity>")
-- ARGV[1] = the dead process's identity
-- Returns how many leases were freed.
local suffix = "|" .. ARGV[1]
local freed = 0
for i = 1, #KEYS do
  for _, member in ipairs(redis.call("ZRANGE", KEYS[i], 0, -1)) do
    if #member > #suffix and string.sub(member, -#suffix) == suffix then
      freed = freed + redis.call("ZREM", KEYS[i], member)
    end
  end
end
return freed
