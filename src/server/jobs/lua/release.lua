-- ARGV: P replica id... (handed back: another replica takes them over at its next renewal)
for i = 3, #ARGV do
  local key = P .. 'job:' .. ARGV[i]
  local j = redis.call('HMGET', key, 'state', 'holder')
  if j[1] and is_open(j[1]) and j[2] == ARGV[2] then
    redis.call('HSET', key, 'lease', 0, 'holder', '')
    redis.call('ZADD', P .. 'open', 0, ARGV[i])
  end
end
return 1
