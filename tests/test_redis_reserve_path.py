"""The gcra script's common case (``_redis_gcra_reserve.lua``, read before everything else) against the script
without it, on random streams of words on one clock: every reply (or error), every stored field and the expiry
asked are the same, whether a call takes the common case or goes on to the general code. The streams mix what
leaves the common case (a first call, two rates, a rate set, a server's limit, a malformed more amount, an epoch
to move, an amount above the burst, malformed words) with the reserves it answers, of one amount or more, paused
or not."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Awaitable, Callable, TypeVar

import pytest
import redis.asyncio
from aiotb import _store_redis
from aiotb._store_redis import Script, definition
from test_redis_parity import SLOW_EXPIRY, SLOWED

T = TypeVar("T")
RunOn = Callable[[asyncio.AbstractEventLoop, Awaitable[T]], T]
COMMON_CASE = (_store_redis.resources.files("aiotb") / "_redis_gcra_reserve.lua").read_text(encoding="utf-8")
WITH = Script.of(SLOW_EXPIRY + _store_redis._CLIENT_CLOCK_SCRIPTS["gcra"].text)  # expiry asked: exact, see below
WITHOUT = Script.of(WITH.text.replace(COMMON_CASE, ""))
DEFINITIONS = [definition([(1e6, 5.0, 5.0)]), definition([(1e6, 5.0, 2.0)]), definition([(333_333.3, 2.5, 0.0)]),
               definition([(1e6, 5.0, 5.0), (1e8, 20.0, 10.0)])]
REBASE_US = 2**50 // 1000 + 1  # µs past the epoch from which the script moves its epoch


def words(rng: random.Random, records: list[list[str]]) -> str:
    """One operation's words: reserves most of the time, at times malformed; now and then the rest."""
    amount = rng.choice([1.0, 0.5, 2.5, 5.0, 6.0, 1e-9, 3.0, 1 / 3])
    wait = rng.choice([-1, 0, 0, 999_999, 1_000_000, 10_000_000, 2**53])
    kind = rng.random()
    if kind < 0.55:
        return f"reserve {amount!r} {wait} {rng.choice('01')}"
    if kind < 0.7:  # more amounts, granted while each is due now; the first malformed one seen is refused
        more = rng.choices(["1.0", "0.5", "2.5", "6.0", "1e-9", "nan", "-1", "x"], [6, 6, 3, 1, 1, 1, 1, 1], k=8)
        return f"reserve {amount!r} {wait} 0 " + " ".join(more[:rng.randrange(1, 9)])
    if kind < 0.75:
        return rng.choice(["reserve -1.0 0 0", "reserve nan 0 0",
                           "reserve inf 0 0", "reserve 1.0 0.5 0", "reserve 1.0 -2 0", f"reserve  {amount!r} 0 0",
                           "reserve 0x10 0 0", "reserve 1.0 0 0 ", "reserve 1.0 1e3 1"])
    if kind < 0.8 and records:
        return "cancel " + " ".join(rng.choice(records))
    return rng.choice([f"pause {rng.choice([0, 1000, 3_000_000])}", f"settle {min(amount, 2.5)!r} {amount * 2!r}",
                       f"settle {min(amount, 2.5)!r} 0.0", "tokens", f"fit {amount!r}",
                       f"limit {rng.choice([0.0, 1.0, 4.0])!r} {rng.choice([0, 2_000_000])} 0",
                       f"set_rate 1 {rng.choice([1e6, 2e6])!r} {rng.choice([5.0, 4.0])!r}"])


async def answer(client: redis.asyncio.Redis, script: Script, key: str, rates: str, said: str,
                 now_us: int) -> tuple[object, ...]:
    """The script's reply to said (or its error), then what the key holds, and the expiry it asked in ms (PEXPIRE
    slowed SLOWED times, so that the server's real ms between the two scripts' calls do not show)."""
    try:
        reply: object = await client.execute_command("EVALSHA", script.sha, 1, key, rates, said, str(now_us))
    except redis.exceptions.ResponseError as error:
        reply = ("error", str(error).split(" script: ")[0])  # without the script's SHA and line
    kept, ttl = await client.hgetall(key), await client.pttl(key)
    return reply, sorted(kept.items()), ttl if ttl < 0 else math.ceil(ttl / SLOWED)


@pytest.mark.parametrize("seed", range(24))
def test_the_common_case_answers_as_the_general_code_does(run_on: RunOn[None], redis_url: str, seed: int) -> None:
    async def main() -> None:
        rng = random.Random(seed)
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            for script in (WITH, WITHOUT):
                await client.script_load(script.text)
            rates, now_us, records, reserves = DEFINITIONS[seed % len(DEFINITIONS)], 10**12 + seed, [], 0
            for _ in range(120):
                step = rng.random()
                if step < 0.03:
                    await client.delete("with", "without")
                now_us += (REBASE_US if step > 0.99 else rng.choice([0, 1, 250, 1000, 4000, 100_000]))
                said = words(rng, records)
                before = await client.hgetall("without")
                ours = await answer(client, WITH, "with", rates, said, now_us)
                theirs = await answer(client, WITHOUT, "without", rates, said, now_us)
                assert ours == theirs, (seed, said, sorted(before.items()))
                reply = ours[0]
                if said.startswith("reserve") and isinstance(reply, bytes) and reply.startswith(b"0 "):
                    reserves += 1
                    records.append([word.decode() for word in reply.split()[3:]])
            assert reserves > 20, f"only {reserves} reserves granted: the streams hardly reach the common case"
        finally:
            await client.aclose()

    run_on(asyncio.new_event_loop(), main())
