-- What aiotb's Redis scripts share (sent as the head of each, after _redis_clock.lua): _redis_gcra.lua keeps rates
-- (GCRA) in one hash, _redis_window.lua a strict sliding window in a hash and a sorted set. Each decision is one
-- script run: one round trip, atomic. Time is the server's (TIME), so the clients' clocks do not matter: a client sends
-- no time, and a server that refuses TIME in scripts cannot hold a limiter.
--
-- Lua's numbers are doubles, exact for integers below 2^53. Instants are integer nanoseconds after the hash's
-- epoch `e` (a server time in microseconds). The client keeps every span it gives at most 2^52 ns (52 days) and a
-- pause at most 2^51 ns, and no reservation is made more than 2^51 ns ahead; once now is 2^50 ns past the epoch,
-- the epoch moves to now and every instant shifts by the same integer (one already past moves to the new epoch:
-- it is as good as now). So every value stays below 2^53: exact.
--
-- ARGV: the definition (what the key was created with), and the operation (its name, then its own words, in
-- one string: the client pays for each argument it sends). A reply is one string of words (one string parses
-- faster than an array): a status (0 ok, 1 an amount above what one grant may take, 3 not within the wait asked,
-- 4 not before held grants end, 5 a key of another definition, then the stored one), then op's own words.

local OK, EINVAL, ETOOLATE, HELD, EMISMATCH = 0, 1, 3, 4, 5
local REBASE_AT = 2 ^ 50
local HORIZON = 2 ^ 51  -- no reservation further ahead than this (26 days), so none reaches 2^53
local definition, W = ARGV[1], {}  -- W: the operation's words, its name first
for word in string.gmatch(ARGV[2], '%S+') do
    W[#W + 1] = word
end
local op = W[1]

-- An integer double as a decimal string, every digit kept: '%d' where Lua's integer format has 64 bits (every
-- 64-bit server; 2.4 times as fast as '%.0f'), else '%.0f' (a 32-bit server, whose '%d' would wrap).
local INT = string.format('%d', 2 ^ 53 + 2) == '9007199254740994' and '%d' or '%.0f'

local function int(x)
    return string.format(INT, x)
end

local function reply(status, ...)  -- the reply: status and words (integers, or strings as they are)
    local words = {status, ...}
    for j, w in ipairs(words) do
        if type(w) == 'number' then
            words[j] = int(w)
        end
    end
    return table.concat(words, ' ')
end

-- A client with script rights could send any words: each is checked before anything is read or written, and a
-- malformed one fails the script with "aiotb: ..." (the client raises StoreCorrupt), changing nothing.
local function refuse(what, word)
    error({err = 'aiotb: ' .. what .. ', got ' .. string.sub(tostring(word), 1, 40)})
end

local function amount_of(word)  -- an amount: a finite number > 0
    local x = tonumber(word)
    if not x or not (x > 0 and x < math.huge) then
        refuse('an amount must be a finite number > 0', word)
    end
    return x
end

local function integer_of(word, least, most)  -- an integer from least to most
    local x = tonumber(word)
    if not x or not (x >= least and x <= most) or x ~= math.floor(x) then
        refuse('expected an integer from ' .. int(least) .. ' to ' .. int(most), word)
    end
    return x
end

local function count_of(word)  -- a count of tokens: a finite number >= 0
    local x = tonumber(word)
    if not x or not (x >= 0 and x < math.huge) then
        refuse('a count must be a finite number >= 0', word)
    end
    return x
end

-- A server's quota as its responses tell it (limits.c's limit_until): before s.lu, grants take at most s.ll
-- tokens in all. A limit still running is tightened by one that ends within slack of it (the same window: the
-- fewer tokens, the later end), replaced by one that ends later, kept by one that ends earlier.
local function limit_until(s, tokens, until_, slack, now)
    if until_ <= now then
        return
    end
    if s.lu and s.lu > now then
        if until_ < s.lu - slack then
            return
        end
        if until_ <= s.lu + slack then
            s.ll, s.lu = math.min(s.ll, tokens), math.max(s.lu, until_)
            return
        end
    end
    s.ll, s.lu = tokens, until_
end

local function limited_from(s, amount, at)  -- the first instant from at on at which a running limit allows amount
    if s.lu and at < s.lu and amount > s.ll then
        return s.lu
    end
    return at
end

local function limit_taken(s, amount, at)  -- counts a grant of amount at at against a running limit
    if s.lu and at < s.lu then
        s.ll = math.max(0, s.ll - amount)
    end
end

local function paused_until(p, until_)  -- the pause p (nil: none) after another until until_: the later of the two
    if not p or until_ > p then
        return until_
    end
    return p
end
