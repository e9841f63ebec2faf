-- Claim one cron slot of a periodic entry for this process, in one atomic step.
-- KEYS[1] = P:periodic:disabled (set), KEYS[2] = P:periodic:last_slot:<name> (string),
-- KEYS[3] = P:periodic:lock:<name>:<slot> (per-slot NX lock),
-- KEYS[4] = P:periodic:running:<name> (until_executed running lock, value = owner jid),
-- KEYS[5] = P:periodic:claims:<identity> (hash: this process's claims not yet pushed),
-- KEYS[6] = P:periodic:claimers (set: identities that may hold claim records),
-- KEYS[7] = P:periodic:version (string: bumped by every change of a database entry)
-- ARGV[1] = entry name, ARGV[2] = slot (epoch, whole seconds),
-- ARGV[3] = slot lock TTL (whole seconds), ARGV[4] = "1" for until_executed else "",
-- ARGV[5] = jid the caller will push this slot's job under,
-- ARGV[6] = running lock TTL until the job is pushed and the lock confirmed (whole
-- seconds; lua/owned_confirm.lua then gives it the queued TTL),
-- ARGV[7] = the claim's field in KEYS[5] ("<slot>:<name>"),
-- ARGV[8] = the claim record ("c <jid> <payload JSON>", built in Python: rule 3),
-- ARGV[9] = this process's identity,
-- ARGV[10] = the version of the database entries the caller runs ("0" when the key was
-- absent; "" for a settings entry, or a worker that can't read the database: no fence)
-- Returns {code, detail, disabled_unreadable}:
--   {"claimed", previous last_slot or ""}: push the job (roll back with
--     periodic_rollback.lua and that previous value if the push fails);
--   {"taken", ""}: this slot (or a later one) was already claimed;
--   {"blocked", holder jid}: an earlier run still holds the running lock;
--   {"disabled", ""}: disabled from the admin (last_slot is left alone);
--   {"stale", version}: the database entries changed since the caller read them (it
--     reads them again; nothing written).
-- disabled_unreadable is "1" when the disabled set could not be read (wrong type):
-- the entry then counts as enabled (losing a Disable is the lesser evil than stopping
-- every entry).
-- The running lock is taken here, with the claim and before the job exists: taken
-- after the push, a fast run could finish (and release nothing) before it was written,
-- wedging the entry. last_slot is checked before the running lock so a slot another
-- process already claimed reads as taken, not blocked.
-- The claim record is written with the claim: if this process dies before its push
-- (lua/periodic_push.lua removes the record with the push, in one step), orphan
-- recovery finds the record and pushes the job, so the slot is late, not lost. Its
-- writes use pcall: a claims hash of the wrong type (until the key guard moves it) must
-- not stop the entry from firing; the slot is then only as safe as it was without it.
-- The fence: a worker that has not seen a change yet (an entry deleted, renamed, its
-- cron line changed) must not fire a slot the change removed.
if ARGV[10] ~= "" then
  local version = redis.call("GET", KEYS[7]) or "0"
  if version ~= ARGV[10] then
    return {"stale", version, ""}
  end
end

local unreadable = ""
local disabled = redis.pcall("SISMEMBER", KEYS[1], ARGV[1])
if type(disabled) == "table" and disabled.err then
  unreadable = "1"
elseif disabled == 1 then
  return {"disabled", "", unreadable}
end

local slot = tonumber(ARGV[2])
-- A last_slot of the wrong type raises here: the caller backs this entry off.
local previous = redis.call("GET", KEYS[2])
if previous then
  local last = tonumber(previous)
  if last and last >= slot then
    return {"taken", "", unreadable}
  end
  -- Not a number: bad data, overwritten below (the rollback then deletes it).
  if not last then
    previous = false
  end
end

if ARGV[4] == "1" then
  local holder = redis.call("GET", KEYS[4])
  if holder then
    return {"blocked", holder, unreadable}
  end
end

-- Breaks the tie should last_slot ever be lost or moved back (failover, key guard).
if not redis.call("SET", KEYS[3], ARGV[5], "NX", "EX", ARGV[3]) then
  return {"taken", "", unreadable}
end
redis.call("SET", KEYS[2], ARGV[2])
if ARGV[4] == "1" then
  redis.call("SET", KEYS[4], ARGV[5], "EX", ARGV[6])
end
redis.pcall("HSET", KEYS[5], ARGV[7], ARGV[8])
redis.pcall("SADD", KEYS[6], ARGV[9])
return {"claimed", previous or "", unreadable}
