-- Keep results of runs (core/results.py) in a round trip of their own: a settlement that
-- has no script to ride with (an ack by LREM, basic fetch, a spread cluster whose
-- results live in another home than the settlement).
-- KEYS[2k-1] = P:result:<jid>, KEYS[2k] = P:ended:<jid>, for each result k = 1..R
-- ARGV = R groups, each as lua/include/keep_result.lua reads it (ttl, terminal, n, pairs)
-- Returns R.
--@include keep_result
local i = 1
for k = 1, #KEYS / 2 do
  i = keep_result(KEYS[2 * k - 1], KEYS[2 * k], i)
end
return #KEYS / 2
