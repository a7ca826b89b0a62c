-- take.lua: one atomic check-and-add on a window's sliding log; the same
-- rules as the in-process MemoryStore (see window.go and redis.go).
--
-- KEYS[1]  the window's sorted set: member = an 8-byte change id (9 bytes,
--          the id and "+", once a retry was admitted on the strength of
--          the change, so release.lua keeps it), score = when the change
--          was recorded, in microseconds
-- ARGV[1]  Limit.Count
-- ARGV[2]  Limit.Period in microseconds
-- ARGV[3]  the change id: a hash of the request uid, or random bytes
-- ARGV[4]  "1" when the id is a uid hash, so that finding it is a retry
-- ARGV[5]  now in microseconds, or "" to read the Redis server's clock
-- Returns {admitted (0|1), changes counted, retry-after in microseconds,
-- the time a new change was recorded or 0 when none was}.
-- Redis before 5 needs this to write after reading TIME; later it is a no-op.
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local now = tonumber(ARGV[5])
local serverClock = not now
if serverClock then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Lua prints large numbers in %.14g; microsecond times need all 16 digits.
local function num(x) return string.format('%.0f', x) end

-- A change recorded at or before now-period has left the window.
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - period))
local n = redis.call('ZCARD', key)
-- Only the newest limit changes count (the limit may have been lowered);
-- the rest can never count again, so they go.
if n > limit then
  redis.call('ZREMRANGEBYRANK', key, 0, n - limit - 1)
  n = limit
end

-- The newest change: a clock that stepped back records at it, and the key
-- lives as long as it counts. Read once; an empty window has none.
local newest = n > 0 and tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) or nil

local admitted, recorded = 0, 0
local retried = ARGV[4] == '1' and ARGV[3] .. '+'
-- Is this uid's change counted already, plain (found) or marked by an
-- admitted retry? An empty window holds neither.
local found, marked = false, false
if retried and n > 0 then
  if redis.REDIS_VERSION_NUM then
    -- Redis 7 and later: both in one call (ZMSCORE, Redis 6.2+).
    local scores = redis.call('ZMSCORE', key, ARGV[3], retried)
    found, marked = scores[1], scores[2]
  else
    found = redis.call('ZSCORE', key, ARGV[3])
    marked = not found and redis.call('ZSCORE', key, retried)
  end
end
if found then
  -- A retry of a change already counted takes no slot; from now on the
  -- change stays counted even if the request that recorded it gives its
  -- slot back.
  redis.call('ZADD', key, found, retried)
  redis.call('ZREM', key, ARGV[3])
  admitted = 1
elseif marked then
  admitted = 1
elseif n < limit then
  -- A server clock that stepped back records at the newest time instead,
  -- which keeps the log ordered and counts the change a little longer.
  local at = now
  if newest and newest > at then at = newest end
  redis.call('ZADD', key, num(at), ARGV[3])
  recorded = at
  newest = at
  n = n + 1
  admitted = 1
end

local retry = 0
if n >= limit and n > 0 then
  -- Full: a slot frees when the oldest counted change leaves.
  local oldest = tonumber(redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')[2])
  retry = period - (now - oldest)
end
-- The key lives exactly as long as its newest change counts, under the
-- period of this call (a reload may have changed it). On the server's
-- clock the time is absolute: PEXPIRE counts from the command's start in
-- whole milliseconds, up to a millisecond before TIME, so the key (and the
-- changes it still counts) would go that much early. A clock a test gives
-- is not the server's, so there the time is relative to it.
if newest then
  if serverClock then
    redis.call('PEXPIREAT', key, num(math.ceil((newest + period) / 1000)))
  else
    redis.call('PEXPIRE', key, num(math.ceil((newest + period - now) / 1000)))
  end
end
return {admitted, n, retry, recorded}
