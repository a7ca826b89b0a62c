-- release.lua: give back the slot of a change take.lua recorded, when the
-- request is not admitted after all (see take.lua for the key's layout).
--
-- KEYS[1]  the window's sorted set
-- ARGV[1]  the change's member, as take.lua recorded it
-- ARGV[2]  when it was recorded, in microseconds (take.lua's answer)
-- Returns 1 when the change was removed, 0 when it is not there as
-- recorded: it has left the window, or a retry of its uid was admitted on
-- its strength (take.lua renamed it), so it stays counted.
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if at and tonumber(at) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
