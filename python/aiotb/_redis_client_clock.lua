-- The tests' clock: read after _redis_common.lua, it puts the client's time (ARGV[3], in microseconds) in the
-- place of the server's, so that a test drives the scripts' time. A store loads scripts with it only where a
-- test set its private switch; the scripts every other client loads take no time from a client.

clock_us = function()
    return tonumber(ARGV[3])
end
