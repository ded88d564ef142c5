"""The C engine and its pure-Python twin give identical results, step by step.

Two tests: random operation streams replayed on each engine with their logs compared at the
end, and a state machine driving both engines in lockstep, each on its own virtual-clock loop,
comparing every result, exception, token count and queue after every step. Sizes follow
tests/profiles.py: ``AIOTB_LONG=1`` runs the long profile (10^5 state-machine sequences)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from conftest import WANT_C, _namespace
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from profiles import hypothesis_settings
from virtual_loop import VirtualClockLoop, run_virtually

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

    run_virtually(main())
    return log


@pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")
@hypothesis_settings(fast=300, long=20_000)
@given(config=CONFIGS, operations=OPERATIONS)
def test_engines_agree(config, operations):
    c_log = replay(_namespace("c"), config, operations)
    py_log = replay(_namespace("py"), config, operations)
    assert c_log == py_log


# ---- the state machine: both engines in lockstep ----

VALID_AMOUNTS = st.sampled_from([1, 1, 1, 0.5, 2, 2.25, 3, 7, 0.1, 1 / 3, 40])
BAD_AMOUNTS = st.sampled_from([0, -1, math.nan, math.inf, 1e308, 1e-308, True, "1", None, 41])
STEPS = st.sampled_from([0, 1e-9, 0.001, 0.01, 0.1, 0.37, 1, 3])


class World:
    """One engine on its own virtual-clock loop; every call returns what an observer sees."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.loop = VirtualClockLoop()
        self.errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda loop, context: self.errors.append(context))
        self.tasks: list[asyncio.Task] = []
        self.log: list[Any] = []  # what the tasks saw, in the order they saw it
        self.limiter: Any = None
        self.on_grant: list[asyncio.Task] = []  # to be cancelled in the dispatch that grants them

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    async def _settle(self) -> None:
        for _ in range(8):  # everything due at this instant; the virtual clock stands still
            await asyncio.sleep(0)

    def settle(self) -> None:
        self.run(self._settle())

    def create(self, config: tuple) -> Any:
        max_rate, period, burst, initial, fair, compat = config

        world = self

        def probe(limiter_class: type) -> type:
            class Probe(limiter_class):  # type: ignore[valid-type,misc]
                __slots__ = ()

                def _dispatch(self, woke_for: float | None = None) -> None:
                    super()._dispatch(woke_for)
                    world.after_dispatch()

            return Probe

        async def make() -> Any:
            if compat:
                self.limiter = probe(self.lib.AsyncLimiter)(max_rate, period)
            else:
                self.limiter = probe(self.lib.Limiter)(max_rate, period, burst=burst, initial=initial, fair=fair)
            return self.limiter.tokens

        return outcome(lambda: self.run(make()))

    def acquire(self, amount: Any, how: str, timeout: float) -> Any:
        index = len(self.tasks)

        async def acquirer() -> None:
            try:
                if how == "plain":
                    await self.limiter.acquire(amount)
                elif how == "timeout":
                    await self.limiter.acquire(amount, timeout=timeout)
                elif how == "wait_for":
                    await asyncio.wait_for(self.limiter.acquire(amount), timeout)
                else:
                    async with self.limiter:
                        self.log.append(("entered", index, self.loop.time()))
                self.log.append(("granted", index, self.loop.time()))
            except (TimeoutError, ValueError, TypeError) as error:
                self.log.append(("refused", index, type(error).__name__, str(error), self.loop.time()))

        self.tasks.append(self.loop.create_task(acquirer()))
        self.settle()
        return self.state()

    def call(self, method: str, amount: Any) -> Any:
        async def call() -> Any:
            return getattr(self.limiter, method)(amount)

        result = outcome(lambda: self.run(call()))
        return result, self.state()

    def advance(self, seconds: float) -> Any:
        self.run(asyncio.sleep(seconds))
        self.settle()
        return self.state()

    def advance_to_head(self) -> Any:
        async def to_head() -> None:
            at = self.limiter._next_due()
            if at is not None:
                due = self.loop.create_future()
                self.loop.call_at(at, due.set_result, None)
                await due

        self.run(to_head())
        self.settle()
        return self.state()

    def after_dispatch(self) -> None:
        """Cancels the marked tasks granted by this dispatch before they resume: a refund."""
        for task in list(self.on_grant):
            waiting_on = task._fut_waiter  # type: ignore[attr-defined]  # the grant's future
            if task.done():
                self.on_grant.remove(task)
            elif waiting_on is not None and waiting_on.done() and not waiting_on.cancelled():
                task.cancel()
                self.on_grant.remove(task)

    def cancel_on_grant(self, pick: int) -> Any:
        pending = [task for task in self.tasks if not task.done()]
        if pending:
            self.on_grant.append(pending[pick % len(pending)])
        return self.state()

    def projected_timeout(self, amount: float, offset_ns: int) -> float | None:
        """A timeout that puts the deadline offset_ns from the grant the twin projects for amount."""
        async def projected() -> float | None:
            bucket = self.limiter
            now = bucket._now()
            at = bucket._core.projected_grant(amount, now)
            return None if at - now + offset_ns < 0 else (at - now + offset_ns) / 1e9

        return self.run(projected())

    def cancel(self, pick: int) -> Any:
        pending = [task for task in self.tasks if not task.done()]
        if pending:
            pending[pick % len(pending)].cancel()
            self.settle()
        return self.state()

    def state(self) -> Any:
        async def read() -> Any:
            limiter = self.limiter
            return (self.loop.time(), limiter.tokens, limiter.waiting, limiter._next_due(),
                    limiter.has_capacity(), list(self.log), limiter.stats())

        return self.run(read())

    def close(self) -> None:
        async def drain() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

        try:
            self.run(drain())
        finally:
            self.loop.close()
        assert not self.errors, self.errors


def outcome(call: Any) -> Any:
    """What call returns, or the type and message of what it raises."""
    try:
        return ("ok", call())
    except (TypeError, ValueError, RuntimeError) as error:
        return ("raised", type(error).__name__, str(error))


class EnginesInLockstep(RuleBasedStateMachine):
    """Both engines get the same operations; every observation must be identical."""

    def __init__(self) -> None:
        super().__init__()
        self.worlds = (World(_namespace("c")), World(_namespace("py")))
        self.alive = False

    def both(self, operation: str, *args: Any) -> Any:
        c, py = (getattr(world, operation)(*args) for world in self.worlds)
        assert c == py, f"{operation}{args}:\n  c:  {c}\n  py: {py}"
        return c

    @initialize(config=CONFIGS)
    def create(self, config: tuple) -> None:
        max_rate, _, burst, initial, _, compat = config
        if initial is not None and initial > (burst if burst is not None else max(max_rate, 1)):
            config = config[:3] + (None,) + config[4:]  # a valid limiter: construction errors are the stream test's
        self.compat = compat
        self.alive = self.both("create", config)[0] == "ok"
        assert self.alive

    @precondition(lambda self: self.alive)
    @rule(amount=VALID_AMOUNTS, how=st.sampled_from(["plain", "plain", "timeout", "wait_for", "with"]),
          timeout=st.sampled_from([0, 0.001, 0.3, 1.7]))
    def acquire(self, amount: float, how: str, timeout: float) -> None:
        if self.compat and how == "timeout":
            how = "plain"
        self.both("acquire", amount, how, timeout)

    @precondition(lambda self: self.alive)
    @rule(amount=BAD_AMOUNTS, how=st.sampled_from(["plain", "timeout"]))
    def acquire_bad(self, amount: Any, how: str) -> None:
        self.both("acquire", amount, how, -1 if how == "timeout" else 0)

    @precondition(lambda self: self.alive)
    @rule(method=st.sampled_from(["try_acquire", "has_capacity"]), amount=VALID_AMOUNTS | BAD_AMOUNTS)
    def call(self, method: str, amount: Any) -> None:
        self.both("call", method, amount)

    @precondition(lambda self: self.alive)
    @rule(seconds=STEPS)
    def advance(self, seconds: float) -> None:
        self.both("advance", seconds)

    @precondition(lambda self: self.alive)
    @rule()
    def advance_to_head(self) -> None:
        self.both("advance_to_head")

    @precondition(lambda self: self.alive)
    @rule(pick=st.integers(0, 50))
    def cancel(self, pick: int) -> None:
        self.both("cancel", pick)

    @precondition(lambda self: self.alive)
    @rule(pick=st.integers(0, 50))
    def cancel_on_grant(self, pick: int) -> None:
        self.both("cancel_on_grant", pick)

    @precondition(lambda self: self.alive and not self.compat)
    @rule(amount=VALID_AMOUNTS, offset=st.sampled_from([-1, 0, 0, 1]))
    def acquire_at_the_projection(self, amount: float, offset: int) -> None:
        """A timeout that ends right at (or a nanosecond around) the projected grant: both engines
        must make the same call at the boundary."""
        timeout = self.worlds[1].projected_timeout(amount, offset)
        if timeout is not None:
            self.both("acquire", amount, "timeout", timeout)

    @invariant()
    def same_state(self) -> None:
        if self.alive:
            self.both("state")

    def teardown(self) -> None:
        c, py = self.worlds
        try:
            c.close()
        finally:
            py.close()


@pytest.mark.skipif(not WANT_C, reason="the pure-Python run was asked for (AIOTB_NO_EXTENSIONS)")
def test_engines_in_lockstep() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(EnginesInLockstep, settings=hypothesis_settings(
        fast=200, long=100_000, stateful_step_count=40))
