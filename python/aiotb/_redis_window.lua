-- A strict sliding window in Redis: at most N tokens granted in any window (t - P, t]. Follows _redis_common.lua.
-- KEYS[1]: a hash of the epoch `e`, the pause `p`, the latest instant reserved `l`, a counter `q`, the window
-- `P` (ns) and `N`, a server's limit (at most `ll` tokens before `lu`), and `u`, the tokens of the grants in the
-- log; KEYS[2]: the log, a sorted set of grants (member "q:amount", ":h" added while held), scored by their
-- instants after the epoch. The definition is "window P N" as created.
--
-- A grant at s is inside every window that ends before s + P. Windows ending at now or later are all that is
-- checked, so grants at or before now - P are dropped. A grant fits at t when the grants in the log from
-- t - P on, with it, are at most N; since that counts every grant later than t as well, a grant that fits at t
-- keeps every later window too, whatever order reservations come in. Reservations are still made in order:
-- none before the latest one made (`l`), so clients are served first come, first served.
--
-- A decision reads no more of the log than it needs: `u` changes with each grant logged, dropped, given back or
-- settled, so a window with room is decided by it alone, and a full one reads its oldest grants, CHUNK at a
-- time, until enough of them leave. A sum kept that way rounds differently from one made afresh: it is made
-- afresh from the log every RESUM_EVERY grants, and is 0 exactly once the log is empty. A key written without
-- `u` has it summed from its log at its first call.
--
-- A held grant (one in use inside `async with`) is scored at its instant + HOLD_LIMIT: inside every window until
-- its hold ends (end_hold scores it at that instant) or that limit passes (a client that died holding it).
-- A grant that would fit only once a held grant leaves is not reserved: the reply (4) says when it would fit were
-- every hold to end now, and the client asks again then.

local hash, log = KEYS[1], KEYS[2]
local HOLD_LIMIT = 300e9  -- ns: the longest a grant is held without its end coming
local MOST_GRANTS = 131072  -- the most grants the log keeps in a window (about 100 bytes of the server's memory
                            -- each): a grant past it waits until one leaves, as for a full window
local CHUNK = 64  -- grants read at a time where a decision reads the log
local RESUM_EVERY = 4096  -- grants logged between two sums of the log made afresh

local function member_of(word)  -- a grant's member in the log, as reserve made it
    if not string.match(word or '', '^%d+:[^:]+:?h?$') then
        refuse('a window record ends with a grant of the log', word)
    end
    return word
end

local function amount_in(member)  -- the tokens of a grant of the log, from its member
    local amount = tonumber(string.match(member, '^%d+:([^:]+):?h?$'))
    if not amount then
        refuse('a grant of the log is not aiotb\'s', member)
    end
    return amount
end

local function held(member)  -- whether a grant of the log is held now
    return string.sub(member, -2) == ':h'
end

local function summed()  -- the tokens of every grant in the log, read whole
    local total = 0
    for _, member in ipairs(redis.call('ZRANGE', log, 0, -1)) do
        total = total + amount_in(member)
    end
    return total
end

local function loaded(now_us)  -- the stored state, a fresh one, or nil and the stored definition
    local v = redis.call('HMGET', hash, 'd', 'e', 'p', 'l', 'q', 'P', 'N', 'lu', 'll', 'u')
    if not v[1] then
        if redis.call('EXISTS', hash) == 1 then
            return nil, nil
        end
        local P, N = string.match(definition, '^window (%S+) (%S+)$')
        return {e = now_us, q = 0, P = integer_of(P, 1, 2 ^ 52), N = amount_of(N), fresh = true, u = summed()}
    end
    if v[1] ~= definition then
        return nil, v[1]
    end
    return {e = tonumber(v[2]), p = tonumber(v[3]), l = tonumber(v[4]), q = tonumber(v[5]), P = tonumber(v[6]),
            N = tonumber(v[7]), lu = tonumber(v[8]), ll = tonumber(v[9]), u = tonumber(v[10]) or summed()}
end

local function trim(s, now)  -- drops the grants that windows ending at now or later cannot see, and their tokens
    local cut = int(now - s.P)
    if redis.call('ZCOUNT', log, '(' .. cut, '+inf') == 0 then  -- every one (an idle key: none read)
        redis.call('DEL', log)
        s.u = 0
        return
    end
    local gone = redis.call('ZRANGEBYSCORE', log, '-inf', cut)
    for _, member in ipairs(gone) do
        s.u = s.u - amount_in(member)
    end
    if #gone > 0 then
        redis.call('ZREMRANGEBYSCORE', log, '-inf', cut)
    end
end

local function since_epoch(s, now_us)  -- now in ns after the epoch, moving the epoch (and the log) when it is far
    local now = (now_us - s.e) * 1000
    if now >= REBASE_AT then
        trim(s, now)  -- what is left is later than now - P
        local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
        for j = 1, #entries, 2 do
            redis.call('ZADD', log, int(tonumber(entries[j + 1]) - now), entries[j])
        end
        s.p = s.p and math.max(s.p - now, 0)  -- an instant past is as good as now
        s.l = s.l and math.max(s.l - now, 0)
        s.lu = s.lu and math.max(s.lu - now, 0)
        s.e, now, s.rebased = now_us, 0, true
    end
    return now
end

local function stored(s, now)  -- writes the state; hash and log expire once every grant has left every window
    redis.call('HSET', hash, 'd', definition, 'e', int(s.e), 'q', int(s.q), 'P', int(s.P),
               'N', string.format('%.17g', s.N), 'l', int(s.l or now), 'u', string.format('%.17g', s.u))
    if s.p then
        redis.call('HSET', hash, 'p', int(s.p))
    end
    if s.lu then
        redis.call('HSET', hash, 'lu', int(s.lu), 'll', string.format('%.17g', s.ll))
    end
    local last = math.max(s.l or now, s.p or now, s.lu or now)
    local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
    if newest[2] then
        last = math.max(last, tonumber(newest[2]))
    end
    local ms = math.max(1, math.ceil((last + s.P - now) / 1e6))
    redis.call('PEXPIRE', hash, ms)
    redis.call('PEXPIRE', log, ms)
end

local function kept(s, now)  -- trim, and the tokens it dropped forgotten in the hash too (of a key stored already)
    local before = s.u
    trim(s, now)
    if s.u ~= before and not s.fresh then
        redis.call('HSET', hash, 'u', string.format('%.17g', s.u))
    end
end

local function fit_at(s, amount, now)  -- the first instant at which amount fits, not before l, the pause and a
    kept(s, now)                        -- limit's end where it holds too few; else nil and that instant were every
    local start = limited_from(s, amount, math.max(now, s.l or now, s.p or now))  -- hold to end now
    local excess, crowd = amount - s.N + s.u, redis.call('ZCARD', log) + 1 - MOST_GRANTS  -- tokens, grants too many
    if excess <= 0 and crowd <= 0 then
        return start
    end
    local left, gone, last, from = 0, 0, now, 0
    repeat  -- oldest first: each unheld grant leaves the windows at its at + P
        local entries = redis.call('ZRANGE', log, from, from + CHUNK - 1, 'WITHSCORES')
        for j = 1, #entries, 2 do
            if not held(entries[j]) then
                local at = tonumber(entries[j + 1])
                left, gone = left + amount_in(entries[j]), gone + 1
                last = math.max(last, at)
                if left >= excess and gone >= crowd then
                    return math.max(start, at + s.P)
                end
            end
        end
        from = from + CHUNK
    until #entries < 2 * CHUNK
    return nil, math.max(start, last + s.P, now + s.P)
end

local function latest_unheld(now)  -- the instant of the newest grant not held, now if none is later
    local from = 0
    repeat
        local entries = redis.call('ZRANGE', log, from, from + CHUNK - 1, 'REV', 'WITHSCORES')
        for j = 1, #entries, 2 do
            if not held(entries[j]) then
                return math.max(now, tonumber(entries[j + 1]))
            end
        end
        from = from + CHUNK
    until #entries < 2 * CHUNK
    return now
end

local function first_settled_as(taken, now)  -- the oldest grant of taken not ahead of now (not held now), or nil
    local from = 0
    repeat
        local entries = redis.call('ZRANGE', log, from, from + CHUNK - 1, 'WITHSCORES')
        for j = 1, #entries, 2 do
            if amount_in(entries[j]) == taken and tonumber(entries[j + 1]) <= now then
                return entries[j], entries[j + 1]
            end
        end
        from = from + CHUNK
    until #entries < 2 * CHUNK
    return nil
end

local now_us = clock_us()
local s, theirs = loaded(now_us)
if not s then
    return reply(EMISMATCH, theirs)
end
local now = since_epoch(s, now_us)
if s.rebased then  -- the log's instants moved with the epoch: the hash's with them, whatever op follows
    stored(s, now)
end

if op == 'reserve' then  -- amount, most ns to wait (-1: any), "1" to hold it: 0, delay, at, record (epoch, member)
    local amount, wait, hold = amount_of(W[2]), integer_of(W[3], -1, 2 ^ 53), W[4] == '1'
    if amount > s.N then
        return reply(EINVAL)
    end
    local at, as_if = fit_at(s, amount, now)
    if not at then
        if wait >= 0 and as_if - now > wait then
            return reply(ETOOLATE, as_if - now)
        end
        return reply(HELD, as_if - now)
    end
    if (wait >= 0 and at - now > wait) or at - now > HORIZON then
        return reply(ETOOLATE, at - now)
    end
    s.q, s.l = s.q + 1, at
    limit_taken(s, amount, at)
    local member = int(s.q) .. ':' .. string.format('%.17g', amount) .. (hold and ':h' or '')
    redis.call('ZADD', log, int(hold and at + HOLD_LIMIT or at), member)
    s.u = s.q % RESUM_EVERY == 0 and summed() or s.u + amount
    stored(s, now)
    return reply(OK, at - now, at, int(s.e), member)
elseif op == 'cancel' then  -- a reservation's record: it leaves the log (fewer grants can only keep the bound)
    local member = member_of(W[#W])
    local at = tonumber(redis.call('ZSCORE', log, member))
    local restored = redis.call('ZREM', log, member)
    if restored == 1 then
        s.u = s.u - amount_in(member)
        kept(s, now)
        if at == s.l then  -- the latest: the next may come as early as the latest left
            s.l = latest_unheld(now)
        end
        stored(s, now)
    end
    return reply(OK, restored)
elseif op == 'end_hold' then  -- a held grant's record: from now on it is inside the windows of its end only
    local member = member_of(W[#W])
    local at = redis.call('ZSCORE', log, member)
    if at and tonumber(at) > now then
        redis.call('ZADD', log, 'XX', int(now), member)
        return reply(OK, 1)
    end
    return reply(OK, 0)
elseif op == 'tokens' then  -- 0, tokens now
    if s.p and s.p > now then
        return reply(OK, 0)
    end
    kept(s, now)
    local left = s.N - s.u  -- held grants included
    if s.lu and s.lu > now then
        left = math.min(left, s.ll)
    end
    return reply(OK, string.format('%.17g', math.max(0, left)))
elseif op == 'fit' then  -- amount: 0 and ns until it fits (were every hold to end now), or 1 above N
    local amount = amount_of(W[2])
    if amount > s.N then
        return reply(EINVAL)
    end
    local at, as_if = fit_at(s, amount, now)
    return reply(OK, (at or as_if) - now)
elseif op == 'set_rate' then  -- window: P in ns, N: from now on
    s.P, s.N = integer_of(W[2], 1, 2 ^ 52), amount_of(W[3])
    stored(s, now)
    return reply(OK)
elseif op == 'pause' then  -- ns from now: no grant before then (a later pause only moves it later)
    s.p = paused_until(s.p, now + integer_of(W[2], 0, 2 ^ 53))
    stored(s, now)
    return reply(OK, s.p - now)
elseif op == 'limit' then  -- tokens, ns from now until the reset, slack ns: at most tokens more before the reset
    limit_until(s, count_of(W[2]), now + integer_of(W[3], 0, HORIZON), integer_of(W[4], 0, HORIZON), now)
    stored(s, now)
    return reply(OK)
elseif op == 'settle' then  -- taken, used[, a held grant's record]: a grant of taken cost used (limits.c's
    local taken, used = amount_of(W[2]), count_of(W[3])  -- window_settle): 0 and the grant's member now, if held
    if taken > s.N then
        return reply(EINVAL)
    end
    local member = W[4] and member_of(W[#W])
    if used > taken and s.lu and now < s.lu then  -- a limit's count loses a debt (never below 0)
        s.ll = math.max(0, s.ll - (used - taken))
    end
    if member then  -- held now, or given back: the grant keeps used from its instant (held: until its hold ends)
        local score = redis.call('ZSCORE', log, member)
        local at = score and tonumber(score)
        if at and (at > now or used < taken) then
            redis.call('ZREM', log, member)
            s.u = s.u - amount_in(member) + used
            member = string.match(member, '^%d+:') .. string.format('%.17g', used) .. (string.match(member, ':h$') or '')
            if used > 0 then
                redis.call('ZADD', log, at, member)
            end
            stored(s, now)
            return reply(OK, member)
        end
    end
    if used > taken then  -- the difference, taken now: a grant of it logged at now
        s.q = s.q + 1
        redis.call('ZADD', log, int(now), int(s.q) .. ':' .. string.format('%.17g', used - taken))
        s.u = s.u + (used - taken)
    elseif not member then  -- the first grant of taken in the log not held now keeps used (none: it has left
        local first, at = first_settled_as(taken, now)  -- every window already)
        if first then
            redis.call('ZREM', log, first)
            if used > 0 then
                redis.call('ZADD', log, at, string.match(first, '^%d+:') .. string.format('%.17g', used)
                                            .. (held(first) and ':h' or ''))
            end
            s.u = s.u - taken + used
        end
    end
    stored(s, now)
    return reply(OK, member)
end
return redis.error_reply('aiotb: unknown operation ' .. tostring(op))
