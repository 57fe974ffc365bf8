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
