-- ARGV: P replica lease_ms id run id run ... -> the ids no longer ours (another run holds
-- them, or they ended), and 'cancel:<id>' for ours whose cancel flag is set (a message missed
-- while the subscriber was away). A takeover's run counts against jobs.max_takeovers from its
-- first renewal (or its finish): a claim whose reply was lost lapses without spending it.
local now = now_ms()
settle_pause(now, tonumber(ARGV[3]))
local lease = now + tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV, 2 do
  local id, run = ARGV[i], ARGV[i + 1]
  local key = P .. 'job:' .. id
  local j = redis.call('HMGET', key, 'state', 'holder', 'cancel', 'run', 'started')
  if j[1] and is_open(j[1]) and j[2] == ARGV[2] and j[4] == run then
    redis.call('HSET', key, 'lease', lease)
    redis.call('ZADD', P .. 'open', lease, id)
    if j[5] == '0' then
      redis.call('HSET', key, 'started', 1)
      redis.call('HINCRBY', key, 'takeovers', 1)
    end
    if j[3] == '1' then table.insert(out, 'cancel:' .. id) end
  else
    table.insert(out, id)
  end
end
return out
