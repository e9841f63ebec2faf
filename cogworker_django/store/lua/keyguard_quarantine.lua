-- Key guard: move a key of the wrong type aside (rule 9: moved, never deleted).
-- KEYS[1] = the key, KEYS[2] = its quarantine name P:quarantine:<key>:<ms>:<rand>
-- ARGV[1] = the type the key must hold, ARGV[2] = quarantine TTL in seconds
-- Returns the type found when the key was moved, or false when it was left alone.
-- The type is checked again here, atomically with the move: a key fixed, emptied or
-- recreated with the right type since the pipelined TYPE check stays where it is.
local actual = redis.call("TYPE", KEYS[1])["ok"]
if actual == "none" or actual == ARGV[1] then
  return false
end
redis.call("RENAME", KEYS[1], KEYS[2])
redis.call("EXPIRE", KEYS[2], ARGV[2])
return actual
