"""Redis Lua scripts, kept together. Each runs atomically on the server."""

# Sliding-window rate limit over several windows at once.
# KEYS: for each window, the current bucket key then the previous bucket key.
# ARGV: n windows, then per window: limit, window length ms, elapsed ms in the current bucket.
# Returns per window the estimated count before this request, then 1 if allowed else 0.
# Consumes from every window only when all allow it.
RATE_LIMIT = """
local n = tonumber(ARGV[1])
local estimates = {}
local allowed = 1
for i = 1, n do
  local limit = tonumber(ARGV[2 + (i - 1) * 3])
  local window = tonumber(ARGV[3 + (i - 1) * 3])
  local elapsed = tonumber(ARGV[4 + (i - 1) * 3])
  local cur = tonumber(redis.call('GET', KEYS[(i - 1) * 2 + 1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[(i - 1) * 2 + 2]) or '0')
  local estimate = prev * (window - elapsed) / window + cur
  estimates[i] = tostring(estimate)
  if estimate + 1 > limit then allowed = 0 end
end
if allowed == 1 then
  for i = 1, n do
    local window = tonumber(ARGV[3 + (i - 1) * 3])
    local key = KEYS[(i - 1) * 2 + 1]
    redis.call('INCR', key)
    redis.call('PEXPIRE', key, window * 2)
  end
end
estimates[n + 1] = allowed
return estimates
"""

# Open visitor sessions (actors/sessions.py).
# KEYS[1]: the visitor's key. ARGV: event time ms, timeout ms, candidate id, key TTL ms.
# Continues the open session (moving its last-seen time forward) or opens the candidate one.
SESSION_ASSIGN = """
local now = tonumber(ARGV[1])
local v = redis.call('GET', KEYS[1])
if v then
  local sep = string.find(v, '|', 1, true)
  local sid = string.sub(v, 1, sep - 1)
  local last = tonumber(string.sub(v, sep + 1))
  if now - last <= tonumber(ARGV[2]) then
    if now > last then redis.call('SET', KEYS[1], sid .. '|' .. now, 'PX', ARGV[4]) end
    return sid
  end
end
redis.call('SET', KEYS[1], ARGV[3] .. '|' .. now, 'PX', ARGV[4])
return ARGV[3]
"""

# Realtime window (actors/realtime.py): sum the per-second buckets server-side, one round trip instead of
# one HGETALL per second of the window.
# ARGV: key prefix, first second, last second. Returns events, pageviews, then path, count pairs.
REALTIME_SUM = """
local events, pageviews = 0, 0
local pages = {}
for sec = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local flat = redis.call('HGETALL', ARGV[1] .. sec)
  for i = 1, #flat, 2 do
    local field, value = flat[i], tonumber(flat[i + 1])
    if field == 'e' then
      events = events + value
    elseif field == 'pv' then
      pageviews = pageviews + value
    else
      pages[field] = (pages[field] or 0) + value
    end
  end
end
local out = {events, pageviews}
for field, value in pairs(pages) do
  out[#out + 1] = field
  out[#out + 1] = value
end
return out
"""
