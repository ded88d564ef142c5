-- The clock of aiotb's Redis scripts, the first lines of each: the server's (TIME), so the clients' clocks do not
-- matter. The tests' scripts put the client's in its place (_redis_client_clock.lua, read next).

local function clock_us()  -- now, in microseconds, on the server's clock
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function kept_ms(ms)  -- how long a lease key is kept: ms on clock_us's clock, which is the server's
    return ms
end
