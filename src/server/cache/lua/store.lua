-- Stores an entry, gives up our claim on it and wakes whoever waits for it.
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
