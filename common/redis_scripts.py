"""Redis Lua scripts, kept together. Each runs atomically on the server."""

# Sliding-window rate limit for a run of hits (the keyed requests of one event-loop turn), each over
# several windows at once. Hits apply in order, so a later hit on the same bucket sees the earlier ones.
# KEYS: per hit, per window: the current bucket key then the previous bucket key.
# ARGV: hits, windows per hit, then per hit per window: limit, window length ms, elapsed ms in the bucket.
# Returns per hit: the estimated count of each window before it, then 1 if allowed else 0.
# A hit consumes from every window only when all allow it.
RATE_LIMIT = """
local hits, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for h = 0, hits - 1 do
  local allowed = 1
  for i = 1, n do
    local slot = h * n + i - 1
    local limit = tonumber(ARGV[3 + slot * 3])
    local window = tonumber(ARGV[4 + slot * 3])
    local elapsed = tonumber(ARGV[5 + slot * 3])
    local cur = tonumber(redis.call('GET', KEYS[slot * 2 + 1]) or '0')
    local prev = tonumber(redis.call('GET', KEYS[slot * 2 + 2]) or '0')
    local estimate = prev * (window - elapsed) / window + cur
    out[#out + 1] = tostring(estimate)
    if estimate + 1 > limit then allowed = 0 end
  end
  if allowed == 1 then
    for i = 1, n do
      local slot = h * n + i - 1
      redis.call('INCR', KEYS[slot * 2 + 1])
      redis.call('PEXPIRE', KEYS[slot * 2 + 1], tonumber(ARGV[4 + slot * 3]) * 2)
    end
  end
  out[#out + 1] = allowed
end
return out
"""

# Open visitor sessions (actors/sessions.py), for a whole batch of visits in one call.
# KEYS: the visitor key of each visit, in order. ARGV: timeout ms, key TTL ms, then per visit: event time
# ms, candidate id. Continues each visitor's open session (moving its last-seen time forward) or opens the
# candidate one; a later visit of the same visitor sees the earlier ones. Returns the session ids in order.
SESSION_ASSIGN = """
local timeout, ttl = tonumber(ARGV[1]), ARGV[2]
local out = {}
for i = 1, #KEYS do
  local now = tonumber(ARGV[1 + i * 2])
  local sid = nil
  local v = redis.call('GET', KEYS[i])
  if v then
    local sep = string.find(v, '|', 1, true)
    local last = tonumber(string.sub(v, sep + 1))
    if now - last <= timeout then
      sid = string.sub(v, 1, sep - 1)
      if now > last then redis.call('SET', KEYS[i], sid .. '|' .. now, 'PX', ttl) end
    end
  end
  if not sid then
    sid = ARGV[2 + i * 2]
    redis.call('SET', KEYS[i], sid .. '|' .. now, 'PX', ttl)
  end
  out[i] = sid
end
return out
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
