/** The ledger's steps in Redis, each one script: atomic on one node, and per scope (one slot) in a cluster. */

// Checks every cap, then holds the amount against all of them, in one step: replicas never both take the last room.
// Holds are `id -> "amount:expiresAt"` in a hash per cap; those of a replica that died expire.
export const RESERVE = `
local now = tonumber(ARGV[1])
local n = #KEYS / 2
for i = 1, n do
  local spent = tonumber(redis.call('GET', KEYS[2 * i - 1]) or '0')
  local held = 0
  local holds = redis.call('HGETALL', KEYS[2 * i])
  for j = 1, #holds, 2 do
    local sep = string.find(holds[j + 1], ':', 1, true)
    if sep == nil or tonumber(string.sub(holds[j + 1], sep + 1)) <= now then
      redis.call('HDEL', KEYS[2 * i], holds[j])
    else
      held = held + tonumber(string.sub(holds[j + 1], 1, sep - 1))
    end
  end
  if spent + held >= tonumber(ARGV[5 + i]) then return {i, spent, held} end
end
for i = 1, n do
  redis.call('HSET', KEYS[2 * i], ARGV[2], ARGV[3] .. ':' .. ARGV[4])
  redis.call('EXPIRE', KEYS[2 * i], ARGV[5])
end
return {0}
`;

// Adds a request's cost to its totals and drops its hold, in one step: the cap never counts both or neither.
export const SETTLE = `
local m = tonumber(ARGV[1])
for i = 1, m do
  if ARGV[2] ~= '0' then
    redis.call('INCRBY', KEYS[i], ARGV[2])
    redis.call('EXPIRE', KEYS[i], ARGV[3 + i])
  end
end
for i = m + 1, #KEYS do redis.call('HDEL', KEYS[i], ARGV[3]) end
return 1
`;
