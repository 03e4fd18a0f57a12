-- An entry and its key's claim, read together: {1, entry} | {0} nothing | {2} the claim is ours
-- | {3, the claim's time left in ms} another replica computes it.
local v = redis.call('GET', KEYS[1])
if v then return {1, v} end
local holder = redis.call('GET', KEYS[2])
if not holder then return {0} end
if holder == ARGV[1] then return {2} end
return {3, redis.call('PTTL', KEYS[2])}
