-- reserve's common case, read before _redis_common.lua (whose functions every run of a script makes anew): amounts
-- on a stored key of one rate whose rate was never set, with no running limit and no epoch to move. The reply and
-- the writes are those of _redis_gcra.lua's reserve, to the word; any other call goes on to it.
do
    local amount, wait, more = string.match(ARGV[2], '^reserve (%S+) (%S+) %S+(.*)$')
    amount, wait = tonumber(amount), tonumber(wait)
    if amount and amount > 0 and amount < math.huge and wait and wait >= -1 and wait <= 2 ^ 53 and
            wait == math.floor(wait) then
        local h = redis.call('HMGET', KEYS[1], 'd', 'n', 'c', 'lu', 'e', 'p', 't1', 'b1', 'k1', 'f1')
        if h[1] == ARGV[1] and h[2] == '1' and h[3] ~= '1' and not h[4] then
            local e, p, t, b, k, f = tonumber(h[5]), tonumber(h[6]), tonumber(h[7]), tonumber(h[8]),
                                     tonumber(h[9]), tonumber(h[10])
            local now = (clock_us() - e) * 1000
            local from = p and p > now and p or now  -- the pause's end, or now
            local need = math.ceil(amount * t)
            local at = math.max(from, f - (k - need))
            if now < 2 ^ 50 and amount <= b then  -- else the epoch moves, or EINVAL
                local INT = string.format('%d', 2 ^ 53 + 2) == '9007199254740994' and '%d' or '%.0f'
                if (wait >= 0 and at - now > wait) or at - now > 2 ^ 51 then
                    return string.format('3 ' .. INT, at - now)
                end
                local record = {f}
                f = math.max(f, at) + need
                record[2] = f
                for word in string.gmatch(more, '%S+') do  -- each more amount, while each is due now too
                    if at ~= now then
                        break
                    end
                    amount = tonumber(word)
                    if not (amount and amount > 0 and amount < math.huge) then
                        record = nil  -- a malformed word: the general code refuses it
                        break
                    end
                    need = math.ceil(amount * t)
                    if amount > b or math.max(from, f - (k - need)) > now then
                        break
                    end
                    record[#record + 1] = f
                    f = math.max(f, now) + need
                    record[#record + 1] = f
                end
                if record then
                    redis.call('HSET', KEYS[1], 'f1', string.format(INT, f))
                    redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil((math.max(now, f, p or now) - now) / 1e6)))
                    return string.format('0' .. string.rep(' ' .. INT, 3 + #record), at - now, at, e, unpack(record))
                end
            end
        end
    end
end
