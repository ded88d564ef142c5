"""The C engine and its pure-Python twin give identical results, step by step."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import WANT_C, _namespace
from aiotb import _core_py

AMOUNTS = st.sampled_from([1, 1, 1, 2, 3, 0.5, 2.25, 7, 40, 41, -1, 0])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), AMOUNTS, st.sampled_from([None, None, 0, 0.3, 1.7])),
        st.tuples(st.just("try"), AMOUNTS),
        st.tuples(st.just("has"), AMOUNTS),
        st.tuples(st.just("sleep"), st.sampled_from([0, 0.001, 0.01, 0.1, 0.37, 1, 3])),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
    ),
    max_size=40,
)
CONFIGS = st.tuples(
    st.sampled_from([1, 2, 3, 7.5, 10, 100]),        # max_rate
    st.sampled_from([0.5, 1, 1.5, 10]),             # time_period
    st.sampled_from([None, 1, 5, 40]),               # burst
    st.sampled_from([None, 0, 1, 2.5]),              # initial
    st.booleans(),                                   # fair
    st.booleans(),                                   # AsyncLimiter instead
)


def replay(lib: Any, config: tuple, operations: list) -> list[Any]:
    """Runs the operations on a virtual clock and logs every observable result."""
    from virtual_loop import VirtualClockLoop

    max_rate, period, burst, initial, fair, compat = config
    log: list[Any] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        try:
            limiter = (lib.AsyncLimiter(max_rate, period) if compat
                       else lib.Limiter(max_rate, period, burst=burst, initial=initial, fair=fair))
        except (TypeError, ValueError) as error:
            log.append(("init", type(error).__name__, str(error)))
            return
        tasks: list[asyncio.Task] = []

        async def acquire(index: int, amount: float, timeout: float | None) -> None:
            try:
                await (limiter.acquire(amount) if compat else limiter.acquire(amount, timeout=timeout))
                log.append(("granted", index, loop.time()))
            except (TimeoutError, ValueError, TypeError) as error:
                log.append(("refused", index, type(error).__name__, str(error), loop.time()))

        for op in operations:
            try:
                if op[0] == "acquire":
                    tasks.append(asyncio.create_task(acquire(len(tasks), op[1], op[2])))
                    await asyncio.sleep(0)
                elif op[0] == "try":
                    log.append(("try", limiter.try_acquire(op[1])))
                elif op[0] == "has":
                    log.append(("has", limiter.has_capacity(op[1])))
                elif op[0] == "sleep":
                    await asyncio.sleep(op[1])
                elif tasks:
                    tasks[op[1] % len(tasks)].cancel()
                    await asyncio.sleep(0)
            except (TypeError, ValueError) as error:
                log.append((op[0], type(error).__name__, str(error)))
            log.append(("state", loop.time(), limiter.tokens, limiter.waiting))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.append(("end", limiter.tokens, limiter.waiting))

    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return log


@pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")
@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, operations=OPERATIONS)
def test_engines_agree(config, operations):
    from aiotb import _tokenbucket

    c_log = replay(_namespace(_tokenbucket), config, operations)
    py_log = replay(_namespace(_core_py), config, operations)
    assert c_log == py_log
