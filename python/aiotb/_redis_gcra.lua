-- A limiter's rates in one Redis hash (KEYS[1]): GCRA, as limits.c and _limits_py.py. Follows _redis_common.lua.
--
-- A rate's state F (the instant it is full again) and the pause `p` are instants after the epoch. A token's need
-- is rounded up to a whole nanosecond (limits.c: to a sixteenth), never down, so the bound burst + rate * t holds.
-- The definition is the rates the hash was created with: "ns_per_token,burst,initial;...".

local key = KEYS[1]

-- The state: rates r[i] = {t = ns per token, b = burst, k = burst in ns, f = F}, epoch e, pause p (or nil), a
-- server's limit (at most ll tokens before lu, or nil), and c
-- (1) while set_rate has left the rates other than the definition's: the hash then never expires, as a full
-- bucket's otherwise does, which would lose the change (the next client creating it from the definition).
local MOST_REFILL = 2 ^ 52  -- ns: the longest full refill kept exact

local function checked_rate(t, b)  -- ns per token and burst, each finite and > 0, refilled within MOST_REFILL
    t, b = amount_of(t), amount_of(b)
    if b * t > MOST_REFILL then
        refuse('a rate must refill its burst within 2^52 ns', b * t)
    end
    return t, b
end

local function created(now_us)  -- a fresh state from the definition, holding each rate's initial tokens
    local s = {e = now_us, r = {}, fresh = true}
    for t, b, i in string.gmatch(definition, '([^,;]+),([^,;]+),([^,;]+)') do
        t, b = checked_rate(t, b)
        i = tonumber(i)
        if not i or not (i >= 0 and i <= b) then
            refuse('initial tokens must be from 0 to the burst', i)
        end
        s.r[#s.r + 1] = {t = t, b = b, k = math.ceil(b * t), f = math.ceil((b - i) * t)}
    end
    if #s.r == 0 then
        refuse('a definition is "ns_per_token,burst,initial;..."', definition)
    end
    return s
end

local function loaded(now_us)  -- the stored state, a fresh one, or nil and the stored definition
    local h = redis.call('HMGET', key, 'd', 'e', 'p', 'n', 't1', 'b1', 'k1', 'f1', 'c', 'lu', 'll')  -- the first rate
    if h[1] ~= definition then                                                                  -- with the rest
        if not h[1] and redis.call('EXISTS', key) == 0 then
            return created(now_us)
        end
        return nil, h[1] or nil
    end
    local s = {e = tonumber(h[2]), p = tonumber(h[3]), c = h[9] == '1', lu = tonumber(h[10]), ll = tonumber(h[11]),
               r = {{t = tonumber(h[5]), b = tonumber(h[6]), k = tonumber(h[7]), f = tonumber(h[8])}}}
    local n = tonumber(h[4])
    if n > 1 then
        local names = {}
        for i = 2, n do
            local j = 4 * (i - 2)
            names[j + 1], names[j + 2], names[j + 3], names[j + 4] = 't' .. i, 'b' .. i, 'k' .. i, 'f' .. i
        end
        local more = redis.call('HMGET', key, unpack(names))
        for i = 2, n do
            local j = 4 * (i - 2)
            s.r[i] = {t = tonumber(more[j + 1]), b = tonumber(more[j + 2]), k = tonumber(more[j + 3]),
                      f = tonumber(more[j + 4])}
        end
    end
    return s
end

local function since_epoch(s, now_us)  -- now in ns after the epoch, moving the epoch first when it is far
    local now = (now_us - s.e) * 1000
    if now >= REBASE_AT then
        for _, r in ipairs(s.r) do  -- an instant past is as good as now: kept at the new epoch, not below it
            r.f = math.max(r.f - now, 0)
        end
        if s.p then
            s.p = math.max(s.p - now, 0)
        end
        if s.lu then
            s.lu = math.max(s.lu - now, 0)
        end
        s.e, now, s.rebased = now_us, 0, true
    end
    return now
end

local function stored(s, now, whole)  -- writes the state's instants (whole: all of it); it expires once every
    local fields = {}                    -- rate is full again and the pause and limit over
    if whole or s.fresh or s.rebased then
        fields = {'d', definition, 'e', int(s.e), 'n', #s.r, 'c', s.c and '1' or '0'}
    end
    local last = now
    for i, r in ipairs(s.r) do
        if whole or s.fresh then
            fields[#fields + 1], fields[#fields + 2] = 't' .. i, string.format('%.17g', r.t)
            fields[#fields + 1], fields[#fields + 2] = 'b' .. i, string.format('%.17g', r.b)
            fields[#fields + 1], fields[#fields + 2] = 'k' .. i, int(r.k)
        end
        fields[#fields + 1], fields[#fields + 2] = 'f' .. i, int(r.f)
        last = math.max(last, r.f)
    end
    if s.p then
        fields[#fields + 1], fields[#fields + 2] = 'p', int(s.p)
        last = math.max(last, s.p)
    end
    if s.lu then
        fields[#fields + 1], fields[#fields + 2] = 'lu', int(s.lu)
        fields[#fields + 1], fields[#fields + 2] = 'll', string.format('%.17g', s.ll)
        last = math.max(last, s.lu)
    end
    redis.call('HSET', key, unpack(fields))
    if s.c then
        redis.call('PERSIST', key)
    else
        redis.call('PEXPIRE', key, math.max(1, math.ceil((last - now) / 1e6)))
    end
end

local function need(r, amount)  -- ns of a rate's tokens that amount takes
    return math.ceil(amount * r.t)
end

local function fit_at(s, amount, now)  -- the first instant >= now at which every rate, the pause and a limit
    local at = now                       -- grant amount
    if s.p and s.p > at then
        at = s.p
    end
    at = limited_from(s, amount, at)
    for _, r in ipairs(s.r) do
        at = math.max(at, r.f - (r.k - need(r, amount)))
    end
    return at
end

local function most(s)  -- the largest amount one grant may take
    local m = math.huge
    for _, r in ipairs(s.r) do
        m = math.min(m, r.b)
    end
    return m
end

local now_us = clock_us()
local s, theirs = loaded(now_us)
if not s then
    return reply(EMISMATCH, theirs)
end
local now = since_epoch(s, now_us)

if op == 'reserve' then  -- amount, most ns to wait (-1: any), a word for the window's script, then more amounts:
    local amount, wait = amount_of(W[2]), integer_of(W[3], -1, 2 ^ 53)  -- 0, delay, at, the record (epoch, each
    local largest = most(s)  -- rate's F before and after), and the same F for each more amount granted
    if amount > largest then
        return reply(EINVAL)
    end
    local at = fit_at(s, amount, now)
    if (wait >= 0 and at - now > wait) or at - now > HORIZON then
        return reply(ETOOLATE, at - now)
    end
    local record, j = {}, 4
    while amount do  -- reserves amount at `at`, adding each rate's F before and after to the record; then, due
        limit_taken(s, amount, at)  -- now, each more amount in turn, while it is due now too
        for _, r in ipairs(s.r) do
            record[#record + 1] = r.f
            r.f = math.max(r.f, at) + need(r, amount)
            record[#record + 1] = r.f
        end
        j = j + 1
        amount = at == now and W[j] and amount_of(W[j])
        if amount and (amount > largest or fit_at(s, amount, now) > now) then
            amount = nil
        end
    end
    stored(s, now)  -- the reply as reply() words it, in one format (the hottest path: every acquire takes it)
    return string.format('%d' .. string.rep(' ' .. INT, 3 + #record), OK, at - now, at, s.e, unpack(record))
end

-- The other operations, with the helpers only they use: a function is made on every run of the script, which
-- reserve, the hottest, should not pay for.
local function rate_set(s, i, t, b, now)  -- rate i to t ns per token and burst b, keeping the tokens held now (at
    local r = s.r[i]                          -- most b; below 0 for tokens reserved ahead), stored
    local held = r.b - math.max(0, r.f - now) / r.t
    r.t, r.b, r.k = t, b, math.ceil(b * t)
    r.f = now + math.ceil((b - math.min(held, b)) * t)
    s.c = false  -- whether any rate now differs from the definition's
    local j = 0
    for dt, db in string.gmatch(definition, '([^,;]+),([^,;]+),[^,;]+') do
        j = j + 1
        s.c = s.c or tonumber(dt) ~= s.r[j].t or tonumber(db) ~= s.r[j].b
    end
    stored(s, now, true)
end

local function tokens(s, now)  -- tokens available at now: the fewest over the rates and a limit, 0 while paused
    if s.p and s.p > now then
        return 0
    end
    local m = math.huge
    if s.lu and s.lu > now then
        m = s.ll
    end
    for _, r in ipairs(s.r) do
        local held = r.b
        if r.f > now then
            held = math.max(0, r.b - (r.f - now) / r.t)
        end
        m = math.min(m, held)
    end
    return m
end

if op == 'cancel' then  -- a reservation's record: restores the rates nobody took from since (a record of
    local restored, record = 0, {unpack(W, 2)}  -- the right shape is trusted: see docs/security.md)
    if #record ~= 1 + 2 * #s.r then
        refuse('a cancel record is the epoch and each rate\'s F before and after', #record)
    end
    for j = 1, #record do
        integer_of(record[j], 0, 2 ^ 53)
    end
    if not s.fresh and record[1] == int(s.e) then
        for i, r in ipairs(s.r) do
            local before, after = tonumber(record[2 * i]), tonumber(record[1 + 2 * i])
            if before > after then
                refuse('a cancel record gives back no more than was taken', before)
            end
            if record[1 + 2 * i] == int(r.f) then
                r.f = before
                restored = restored + 1
            end
        end
        if restored > 0 then
            stored(s, now)
        end
    end
    return reply(OK, restored)
elseif op == 'tokens' then  -- 0, tokens now
    return reply(OK, string.format('%.17g', tokens(s, now)))
elseif op == 'fit' then  -- amount: 0 and ns until every rate grants it, or 1 above a burst
    local amount = amount_of(W[2])
    if amount > most(s) then
        return reply(EINVAL)
    end
    return reply(OK, fit_at(s, amount, now) - now)
elseif op == 'set_rate' then  -- index, ns per token, burst: keeps the tokens held now, at most the new burst
    local t, b = checked_rate(W[3], W[4])
    rate_set(s, integer_of(W[2], 1, #s.r), t, b, now)
    return reply(OK)
elseif op == 'adapt' then  -- "cut" µs since the request was sent, or "grow" µs since the caller began to count its
    -- successes; then the period (ns), min_rate, max_rate, decrease, increase, the tokens the caller served in the
    -- last period and its name: AdaptiveLimiter's rule on the first rate, for every client of the key (see
    -- _adaptive.py). The key keeps the last cut's instant (ac, µs on clock_us's clock), the rate it cut from (ah),
    -- the next step above that (ap), and what each client last said it served (s:name, "tokens µs"), whose sum
    -- over the last period is the floor's: what the server served them all. A cut comes only for a request sent
    -- after the last one; a step only if no cut came since the caller began to count. 0, 1 if it cut or stepped
    -- (else 0), ns per token now, µs since the last cut (-1: none).
    local kind, age = W[2], integer_of(W[3], 0, 2 ^ 52)
    local period, least, most_rate = amount_of(W[4]), amount_of(W[5]), amount_of(W[6])
    local decrease, increase, served, name = amount_of(W[7]), amount_of(W[8]), count_of(W[9]), W[10]
    if (kind ~= 'cut' and kind ~= 'grow') or least > most_rate or decrease >= 1 then
        refuse('adapt takes cut or grow, min_rate <= max_rate and decrease < 1', W[2])
    end
    if not string.match(name or '', '^%x+$') or #name > 32 then
        refuse('a client of adapt is named by up to 32 hexadecimal digits', name)
    end
    checked_rate(period / least, s.r[1].b)  -- the slowest rate the rule may set: nothing is written before this
    if s.fresh then  -- the state first, so that the key is a limiter's whatever is written next
        stored(s, now, true)
    end
    redis.call('HSET', key, 's:' .. name, string.format('%.17g', served) .. ' ' .. int(now_us))
    local a = redis.call('HMGET', key, 'ac', 'ah', 'ap')
    local cut_at, too_high, probe = tonumber(a[1]), tonumber(a[2]) or most_rate, tonumber(a[3]) or increase
    local r = s.r[1]
    local rate, new = period / r.t, nil
    if kind == 'cut' then
        if cut_at and now_us - age <= cut_at then  -- sent before the last cut, or at its instant: its round
            return reply(OK, 0, string.format('%.17g', r.t), now_us - cut_at)
        end
        local all, stale = redis.call('HGETALL', key), {}
        served = 0
        for j = 1, #all, 2 do  -- what the clients served in the last period, by their last word of it
            if string.sub(all[j], 1, 2) == 's:' then
                local tokens, at = string.match(all[j + 1], '^(%S+) (%S+)$')
                tokens, at = tonumber(tokens), tonumber(at)
                if tokens and at and now_us - at < period / 1000 then
                    served = served + tokens
                else
                    stale[#stale + 1] = all[j]
                end
            end
        end
        if #stale > 0 then
            redis.call('HDEL', key, unpack(stale))
        end
        new = math.max(least, decrease * rate, math.min(rate, decrease * served))
        cut_at, too_high, probe = now_us, rate, increase
        redis.call('HSET', key, 'ac', int(cut_at), 'ah', string.format('%.17g', too_high), 'ap',
                   string.format('%.17g', probe))
        if new >= rate then  -- at min_rate already: a cut all the same, which ends the round
            stored(s, now, true)
            return reply(OK, 1, string.format('%.17g', r.t), 0)
        end
    else
        if (cut_at and now_us - age < cut_at) or rate >= most_rate then  -- a cut came meanwhile, or at the most
            return reply(OK, 0, string.format('%.17g', r.t), cut_at and now_us - cut_at or -1)
        end
        local step = math.max(increase, (too_high - rate) / 2)
        if rate >= too_high then  -- above the rate known too high: BIC's search, a step twice the last
            step, probe = probe, probe * 2
            redis.call('HSET', key, 'ap', string.format('%.17g', probe))
        end
        new = math.min(most_rate, rate + step)
    end
    local t = period / new
    rate_set(s, 1, t, r.b, now)
    return reply(OK, 1, string.format('%.17g', t), cut_at and now_us - cut_at or -1)
elseif op == 'pause' then  -- ns from now: no grant before then (a later pause only moves it later)
    s.p = paused_until(s.p, now + integer_of(W[2], 0, 2 ^ 53))
    stored(s, now)
    return reply(OK, s.p - now)
elseif op == 'limit' then  -- tokens, ns from now until the reset, slack ns: at most tokens more before the reset
    limit_until(s, count_of(W[2]), now + integer_of(W[3], 0, HORIZON), integer_of(W[4], 0, HORIZON), now)
    stored(s, now)
    return reply(OK)
elseif op == 'settle' then  -- taken, used: a grant of taken cost used (limits.c's tb_limits_settle). Less: each
    local taken, used = amount_of(W[2]), count_of(W[3])  -- rate gets the difference back, never fuller than full;
    if taken > most(s) then                               -- more: each takes it now, as debt; 1 if a debt would
        return reply(EINVAL)                              -- reach past HORIZON
    end
    local change = {}
    for i, r in ipairs(s.r) do
        change[i] = need(r, used) - need(r, taken)
        if change[i] > 0 and math.max(r.f, now) + change[i] - now > HORIZON then
            return reply(EINVAL)
        end
    end
    for i, r in ipairs(s.r) do
        if change[i] > 0 then
            r.f = math.max(r.f, now) + change[i]
        else
            r.f = math.max(r.f + change[i], now)
        end
    end
    if used > taken and s.lu and now < s.lu then  -- a limit's count loses a debt (never below 0)
        s.ll = math.max(0, s.ll - (used - taken))
    end
    stored(s, now)
    return reply(OK)
end
return redis.error_reply('aiotb: unknown operation ' .. tostring(op))
