-- The tests' clock: read after _redis_clock.lua, it puts the client's time (ARGV[3], in microseconds) in the
-- place of the server's, so that a test drives the scripts' time. A store loads scripts with it only where a
-- test set its private switch; the scripts every other client loads take no time from a client.

clock_us = function()
    return tonumber(ARGV[3])
end

-- A lease key's expiry counts the server's real milliseconds, which a test's clock does not follow: a key meant
-- to outlive the test's next call by 2 ms expired when the machine took longer between two calls. Kept a minute
-- more here (the expiry itself is tested on the server's clock, tests/test_redis_lease.py).
kept_ms = function(ms)
    return ms + 60000
end
