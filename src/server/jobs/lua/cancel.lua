-- ARGV: P id owner
local key = P .. 'job:' .. ARGV[2]
local j = redis.call('HMGET', key, 'owner', 'state')
if j[1] and j[1] == ARGV[3] and is_open(j[2]) then
  redis.call('HSET', key, 'cancel', 1)
  redis.call('PUBLISH', P .. 'job-cancel', ARGV[2])
  return 1
end
return 0
