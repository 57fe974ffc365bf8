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

# Open visits (actors/sessions.py), for a whole batch of site events in one call.
# KEYS: per event, the visitor's key, then its sid's key (the visitor's again when there is no sid).
# ARGV: timeout ms, key TTL ms, then per event: event time ms, candidate visit id, mode, acquisition (text
# the script only stores and returns). Mode: v no sid, j page-load sid, n sid after reset, x exact sid.
# A value is the JSON array [visit id, last ms, acquisition]. An event continues the open visit its sid has
# joined (modes j, n, x); else, in modes v and j, the visitor's open visit; else it opens the candidate with
# its own acquisition. The visit is then stored under the sid (if any) and, except in mode x, under the
# visitor; a later event of the batch sees the earlier ones. Returns visit id, acquisition per event.
VISIT_ASSIGN = """
local timeout, ttl = tonumber(ARGV[1]), ARGV[2]
local function open(key, now)
  local v = redis.call('GET', key)
  if not v then return nil end
  local visit = cjson.decode(v)
  if now - visit[2] <= timeout then return visit end
  return nil
end
local out = {}
for i = 1, #KEYS / 2 do
  local visitor_key, sid_key = KEYS[i * 2 - 1], KEYS[i * 2]
  local at = (i - 1) * 4 + 3
  local now, mode = tonumber(ARGV[at]), ARGV[at + 2]
  local visit = nil
  if mode ~= 'v' then visit = open(sid_key, now) end
  if not visit and (mode == 'v' or mode == 'j') then visit = open(visitor_key, now) end
  if visit then
    if now > visit[2] then visit[2] = now end
  else
    visit = {ARGV[at + 1], now, ARGV[at + 3]}
  end
  local value = cjson.encode(visit)
  if mode ~= 'v' then redis.call('SET', sid_key, value, 'PX', ttl) end
  if mode ~= 'x' then redis.call('SET', visitor_key, value, 'PX', ttl) end
  out[#out + 1] = visit[1]
  out[#out + 1] = visit[3]
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
