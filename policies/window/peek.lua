-- peek.lua: a window's state now, changing nothing (see take.lua for the
-- layout of the key).
--
-- KEYS[1]  the window's sorted set
-- ARGV[1]  Limit.Count
-- ARGV[2]  Limit.Period in microseconds
-- ARGV[3]  now in microseconds, or "" to read the Redis server's clock
-- Returns {0, changes counted, retry-after in microseconds}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function num(x) return string.format('%.0f', x) end

-- Changes recorded after now-period count, at most limit of them.
local n = redis.call('ZCOUNT', key, '(' .. num(now - period), '+inf')
local retry = 0
if n >= limit then
  n = limit
  local oldest = tonumber(redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')[2])
  retry = period - (now - oldest)
end
return {0, n, retry}
