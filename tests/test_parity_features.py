"""The two engines agree step by step on several rates, windows, rate changes, pauses and reservations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import WANT_C, _namespace
from hypothesis import given
from hypothesis import strategies as st
from profiles import hypothesis_settings
from virtual_loop import run_virtually

AMOUNTS = st.sampled_from([1, 1, 2, 3, 0.5, 2.25, 5, 11])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), AMOUNTS, st.sampled_from([None, None, 0, 0.3, 2.5])),
        st.tuples(st.just("reserve"), AMOUNTS),
        st.tuples(st.just("try"), AMOUNTS),
        st.tuples(st.just("sleep"), st.sampled_from([0, 0.001, 0.1, 0.37, 1, 3])),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("set_rate"), st.sampled_from([1, 2, 5, 20]), st.sampled_from([None, 0.5, 3])),
        st.tuples(st.just("penalize"), st.sampled_from([0, 0.2, 1.5])),
    ),
    max_size=30,
)
KINDS = st.sampled_from([
    ("rates", [(10, 1), (20, 60)]),
    ("rates", [(3, 1, 5), (7.5, 10, 10, 2)]),
    ("rates", [(2, 0.5, 3, 0)]),
    ("window", (10, 1)),
    ("window", (7, 1.5)),
])


def replay(lib: Any, kind: tuple, fair: bool, operations: list) -> list[Any]:
    log: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if kind[0] == "rates":
            limiter = lib.Limiter(rates=kind[1], fair=fair)
        else:
            limiter = lib.WindowLimiter(*kind[1], fair=fair)
        tasks: list[asyncio.Task] = []

        async def wait(index: int, awaitable: Any) -> None:
            try:
                await awaitable
                log.append(("granted", index, loop.time()))
            except (TimeoutError, ValueError) as error:
                log.append(("refused", index, type(error).__name__, loop.time()))

        for op in operations:
            try:
                if op[0] == "acquire":
                    tasks.append(asyncio.create_task(wait(len(tasks), limiter.acquire(op[1], timeout=op[2]))))
                    await asyncio.sleep(0)
                elif op[0] == "reserve":
                    reservation = limiter.reserve(op[1])
                    log.append(("reserved", reservation.ready_at))
                    tasks.append(asyncio.create_task(wait(len(tasks), reservation)))
                    await asyncio.sleep(0)
                elif op[0] == "try":
                    log.append(("try", limiter.try_acquire(op[1])))
                elif op[0] == "sleep":
                    await asyncio.sleep(op[1])
                elif op[0] == "cancel":
                    if tasks:
                        tasks[op[1] % len(tasks)].cancel()
                        await asyncio.sleep(0)
                elif op[0] == "set_rate":
                    limiter.set_rate(op[1], op[2])
                    await asyncio.sleep(0)
                else:
                    limiter.penalize(op[1])
            except (TypeError, ValueError) as error:
                log.append((op[0], type(error).__name__, str(error)))
            log.append(("state", loop.time(), limiter.tokens, limiter.waiting, limiter.stats()[:2]))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.append(("end", limiter.tokens, limiter.waiting))

    run_virtually(main())
    return log


@pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")
@hypothesis_settings(fast=200, long=20_000)
@given(kind=KINDS, fair=st.booleans(), operations=OPERATIONS)
def test_engines_agree_on_every_limit(kind, fair, operations):
    assert replay(_namespace("c"), kind, fair, operations) == replay(_namespace("py"), kind, fair, operations)
