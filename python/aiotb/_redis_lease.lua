-- A limiter's rates leased out in units (KEYS[1], a hash), for limiters that grant locally: each unit is
-- 1/n of every rate and of every burst, so whatever the holders hold sums to at most the whole. A holder
-- grants from its units on its own clock until its lease ends, span after the server's instant of the call
-- that last renewed it, and renews well before. Follows _redis_common.lua.
--
-- A unit that is not held refills on the server: it holds its tokens at the instant it came back (a fraction
-- g of its burst) plus what it refilled since, at most its burst. A holder takes the fullest free units and
-- adds their tokens to its own; it gives units back with what it cannot keep of its tokens. A holder that
-- does not renew in time loses its units, empty at the instant its lease ended (it may have spent them just
-- before). No token is ever made on a move, so the bound burst + rate * t holds over all the holders together.
--
-- Debts (a grant settled for more than it took): a holder keeps its own in the tokens of its units, and tells
-- with each call what it owes (at most what it would still owe at its lease's end). What a holder lets go of (its last unit, or its
-- lease not renewed in time) goes to the key, which charges it to the next holder left holding units by a
-- lease call, in the tokens the call answers (below 0: a debt); so no debt is lost, it only moves.
--
-- The definition: "lease <units> <span in us> <ns_per_token>,<burst>,<initial>;...". Times are the server's,
-- in microseconds since the Unix epoch: integers exact in a double until the year 2255.
--
-- Fields: d the definition, H the holders ("id,units,want,end_us,owed" each: owed, the tokens it would still
-- owe at its end), F the free units ("since_us,g" each), p the end of a pause (us), o the tokens owed to the key.

local key = KEYS[1]
local n, span, rates_text = string.match(definition, '^lease (%d+) (%d+) (.+)$')
if not n then
    return redis.error_reply('aiotb: a lease definition is "lease <units> <span> <rates>"')
end
n, span = tonumber(n), tonumber(span)
local rates = {}
for t, b, i in string.gmatch(rates_text, '([^,;]+),([^,;]+),([^,;]+)') do
    rates[#rates + 1] = {t = tonumber(t), b = tonumber(b), i = tonumber(i)}
end

local function unit_tokens(unit, now)  -- tokens a free unit holds at now: the fewest over the rates
    local m = math.huge
    for _, r in ipairs(rates) do
        local cap = r.b / n
        m = math.min(m, cap, unit.g * cap + (now - unit.since) * 1000 / (n * r.t))
    end
    return m
end

local function fullest_first(now)  -- orders free units by their tokens at now, the most first
    return function(x, y)
        return unit_tokens(x, now) > unit_tokens(y, now)
    end
end

local function fair_shares(holders)  -- the units of each holder in a max-min fair split of n over their wants
    local order = {}
    for id, h in pairs(holders) do
        order[#order + 1] = {id = id, want = h.want, units = h.units}
    end
    table.sort(order, function(x, y)  -- the one holding more last, so that it keeps more on a tie
        if x.want ~= y.want then return x.want < y.want end
        if x.units ~= y.units then return x.units < y.units end
        return x.id < y.id
    end)
    local left, share = n, {}
    for j, h in ipairs(order) do
        local a = math.min(h.want, math.floor(left / (#order - j + 1)))
        share[h.id], left = a, left - a
    end
    return share
end

local now = clock_us()
local h = redis.call('HMGET', key, 'd', 'H', 'F', 'p', 'o')
local holders, free, pause, owed = {}, {}, tonumber(h[4]), tonumber(h[5]) or 0
if h[1] ~= definition then
    if h[1] or redis.call('EXISTS', key) == 1 then
        return reply(EMISMATCH, h[1])
    end
    local g = 1  -- a new key: every unit holds its share of the initial tokens (the smallest share of a burst)
    for _, r in ipairs(rates) do
        g = math.min(g, r.i / r.b)
    end
    for _ = 1, n do
        free[#free + 1] = {since = now, g = g}
    end
else
    for id, units, want, ends, o in string.gmatch(h[2] or '', '(%w+),(%d+),(%d+),(%d+),?([^ ,]*)') do
        units, ends, o = tonumber(units), tonumber(ends), tonumber(o) or 0  -- no debt: written before debts were
        if ends > now then
            holders[id] = {units = units, want = tonumber(want), ends = ends, owed = o}
        else  -- a lease not renewed in time: its units come back empty as of its end, its debt to the key
            for _ = 1, units do
                free[#free + 1] = {since = ends, g = 0}
            end
            owed = owed + o
        end
    end
    for since, g in string.gmatch(h[3] or '', '(%d+),([^ ]+)') do
        free[#free + 1] = {since = tonumber(since), g = tonumber(g)}
    end
end

local function holder_of(word)  -- a holder's id: letters and digits, as the holders' field is parsed
    if not string.match(word or '', '^%w+$') or #word > 64 then
        refuse('a holder is named by at most 64 letters and digits', word)
    end
    return word
end

local function share_of(word)  -- the share of its burst a unit given back holds: a finite number (kept in 0..1)
    local g = tonumber(word)
    if not g or not (g > -math.huge and g < math.huge) then
        refuse('a unit given back holds a finite share of its burst', word)
    end
    return g
end

local function give_back(count, g)  -- count units back to the free ones, holding g of their burst now
    g = math.max(0, math.min(1, g))
    for _ = 1, count do
        free[#free + 1] = {since = now, g = g}
    end
end

local function stored()  -- writes holders, free units and pause; the key expires once every unit is full again
    local hs, fs, last = {}, {}, now  -- (a held one counted from its lease's end, as if spent then) and the pause
    local refill, slowest = 0, 0      -- is over; a debt, once refilled at the key's slowest rate
    for _, r in ipairs(rates) do
        refill = math.max(refill, math.ceil(r.b * r.t / 1000))
        slowest = math.max(slowest, r.t / 1000)
    end
    for id, x in pairs(holders) do
        hs[#hs + 1] = string.format('%s,%d,%d,' .. INT .. ',%.17g', id, x.units, x.want, x.ends, x.owed)
        last = math.max(last, x.ends + refill + math.ceil(x.owed * slowest))
    end
    last = math.max(last, now + refill + math.ceil(owed * slowest))
    for _, u in ipairs(free) do
        fs[#fs + 1] = string.format(INT .. ',%.17g', u.since, u.g)
        last = math.max(last, u.since + refill)
    end
    if pause then
        last = math.max(last, pause)
    end
    redis.call('HSET', key, 'd', definition, 'H', table.concat(hs, ' '), 'F', table.concat(fs, ' '),
        'p', int(pause or 0), 'o', string.format('%.17g', owed))
    redis.call('PEXPIRE', key, kept_ms(math.max(1, math.ceil((last - now) / 1000) + 1)))
end

local function pause_left()  -- ns until the pause ends (0: none)
    return math.max(0, ((pause or 0) - now) * 1000)
end

-- lease: id, units held, units wanted, g of the units given back, debt (what it would owe at its end; keeping no
-- unit, what it owes now). Answers 0, units now, the fair share, 1 if the holder had no lease, tokens (below 0:
-- a debt it takes), pause ns.
if op == 'lease' then
    local id, have, want, g = holder_of(W[2]), integer_of(W[3], 0, 2 ^ 31), integer_of(W[4], 0, 2 ^ 31), share_of(W[5])
    local debt = count_of(W[6])
    local me = holders[id]
    local fresh = me == nil
    local units = me and me.units or 0
    if have < units then
        give_back(units - have, g)
        units = have
    end
    if fresh then  -- what it owed went to the key as its lease lapsed (or it held none)
        debt = 0
    elseif units == 0 then  -- it lets go of its debt with its last unit
        owed, debt = owed + debt, 0
    end
    holders[id] = {units = units, want = math.min(want, n), ends = now + span, owed = debt}
    local share = fair_shares(holders)[id]
    local tokens = 0
    if share > units and #free > 0 then
        table.sort(free, fullest_first(now))
        local taken = math.min(share - units, #free)
        for j = 1, taken do
            tokens = tokens + unit_tokens(free[j], now)
        end
        for _ = 1, taken do
            table.remove(free, 1)
        end
        units = units + taken
    end
    if units > 0 and owed > 0 then  -- the key's debt, charged to a holder of units
        tokens, holders[id].owed, owed = tokens - owed, debt + owed, 0
    end
    holders[id].units = units
    if units == 0 and want == 0 then
        holders[id] = nil
    end
    stored()
    return reply(OK, units, share, fresh and 1 or 0, string.format('%.17g', tokens), pause_left())
elseif op == 'release' then  -- id, g of its units given back, the tokens it owes now: every unit of the holder back
    local id, g, debt = holder_of(W[2]), share_of(W[3]), count_of(W[4])
    if holders[id] or debt > 0 then
        give_back(holders[id] and holders[id].units or 0, g)
        holders[id], owed = nil, owed + debt
        stored()
    end
    return reply(OK)
elseif op == 'owe' then  -- id, the tokens it owes now: kept with its lease, else taken by the key (answers 1)
    local id, debt = holder_of(W[2]), count_of(W[3])
    local taken = 0
    if holders[id] then
        holders[id].owed = debt
    else
        owed, taken = owed + debt, 1
    end
    stored()
    return reply(OK, taken)
elseif op == 'pause' then  -- ns from now: no grant before then, for every holder as it next renews
    pause = paused_until(pause, now + math.ceil(integer_of(W[2], 0, 2 ^ 53) / 1000))
    stored()
    return reply(OK, pause_left())
end
return redis.error_reply('aiotb: unknown operation ' .. tostring(op))
