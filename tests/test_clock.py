"""Which clock a limiter reads: the running loop's, always, however contexts, loops and threads mix.

The C engine reads CLOCK_MONOTONIC itself once it has proven that the running loop's clock is
that clock; these tests change the loop under it in every way a user can and check that it
notices (the twin always asks the loop, so it is the reference)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import threading
import warnings
from typing import Any

import pytest


def _patched_loop(clock: list[float]) -> asyncio.AbstractEventLoop:
    """A stock asyncio loop whose instance reads a clock the test moves (as mocks and freezers do)."""
    loop = asyncio.new_event_loop()
    real_time = loop.time
    start = real_time()
    loop.time = lambda: clock[0] + (real_time() - start)  # type: ignore[method-assign]
    return loop


def test_one_context_on_two_loops_reads_each_loops_clock(lib):
    """One Context run on two loops, the second with its clock patched on the instance: the
    second loop's clock counts. (The C engine once kept its proof for the first loop in the
    context and read CLOCK_MONOTONIC on the second: two grants 4 ms apart at 1 per second.)"""
    limiter = lib.Limiter(1, 1, burst=1)
    context = contextvars.copy_context()

    async def first() -> None:
        await limiter.acquire()

    async def second(clock: list[float]) -> list[bool]:
        answers = [limiter.try_acquire()]  # the token granted on the first loop is not back
        clock[0] += 0.5
        answers.append(limiter.try_acquire())
        clock[0] += 0.6  # 1.1 s later on this loop's clock: one token is back
        answers.append(limiter.try_acquire())
        return answers

    with asyncio.Runner() as runner:
        runner.run(first(), context=context)
    clock = [1000.0]
    with asyncio.Runner(loop_factory=lambda: _patched_loop(clock)) as runner:
        assert runner.run(second(clock), context=context) == [False, False, True]


def test_a_class_patched_after_the_proof_is_read(lib):
    """The proof is dropped when the loop's class changes while it runs (type watchers on 3.12+)."""
    limiter = lib.Limiter(1, 1, burst=1)

    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        await limiter.acquire()  # proves the loop's clock, on the C engine
        fake = [loop.time() + 1000.0]
        cls: Any = type(loop)
        original = cls.__dict__.get("time")
        cls.time = lambda self: fake[0]
        try:
            answers = [limiter.try_acquire()]
            fake[0] += 1.5
            answers.append(limiter.try_acquire())
        finally:
            if original is None:
                del cls.time
            else:
                cls.time = original
        return answers

    with asyncio.Runner() as runner:
        assert runner.run(main()) == [False, True]


@pytest.mark.parametrize("threads", [2, 4])
def test_loops_in_several_threads_each_read_their_own_clock(lib, threads):
    """A limiter per thread, each thread with its loop: each limiter paces on its own loop's clock,
    whichever thread proved a loop first."""
    results: dict[int, list[bool]] = {}
    barrier = threading.Barrier(threads)

    def worker(index: int) -> None:
        limiter = lib.Limiter(1, 1, burst=1)
        patched = index % 2 == 1
        clock = [50.0 * index]

        async def main() -> list[bool]:
            barrier.wait(timeout=30)
            answers = [limiter.try_acquire(), limiter.try_acquire()]
            if patched:
                clock[0] += 1.1
                answers.append(limiter.try_acquire())
            return answers

        factory = (lambda: _patched_loop(clock)) if patched else asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            results[index] = runner.run(main())

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert {i: results.get(i) for i in range(threads)} == {
        i: [True, False, True] if i % 2 else [True, False] for i in range(threads)}


def test_a_limiter_moves_between_loops_in_two_threads(lib):
    """One limiter used on a loop in one thread, then (no one waiting) on a loop in another thread:
    the second loop's clock counts there."""
    limiter = lib.Limiter(1, 1, burst=1)
    clock = [5000.0]
    answers: list[bool] = []

    async def first() -> None:
        await limiter.acquire()

    async def second() -> None:
        answers.append(limiter.try_acquire())
        clock[0] += 1.1
        answers.append(limiter.try_acquire())

    def in_thread() -> None:
        with asyncio.Runner(loop_factory=lambda: _patched_loop(clock)) as runner:
            runner.run(second())

    asyncio.run(first())
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=60)
    assert answers == [False, True]


def test_the_engine_names_the_running_loop_as_asyncio_does(lib):
    """The limiter's waits go to the dispatcher of the loop the engine names (the C engine from its
    proof of the clock): asyncio's running loop, however one Context, loops and threads mix, and
    None outside a loop."""
    limiter = lib.Limiter(1000, 1, burst=1)
    context = contextvars.copy_context()
    named: list[bool] = []

    async def check() -> None:
        limiter.try_acquire()  # a reading of the clock: proves this loop's, on the C engine
        await asyncio.sleep(0)
        limiter.try_acquire()
        named.append(limiter._running_loop() is asyncio.get_running_loop())

    def in_thread() -> None:
        with asyncio.Runner() as runner:
            runner.run(check())

    clock = [100.0]
    for factory in (asyncio.new_event_loop, lambda: _patched_loop(clock), asyncio.new_event_loop):
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(check(), context=context)
            named.append(limiter._running_loop() is None)  # between two runs, outside the loop
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=60)
    assert named == [True] * 7


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_names_the_running_loop_as_asyncio_does(lib):
    """A child forked inside a task, entering a new context (as its next task step would): asyncio 3.11
    answers None there, later versions the loop; the engine gives asyncio's answer."""
    async def main() -> int:
        limiter = lib.Limiter(1000, 1, burst=1)
        limiter.try_acquire()  # proves this loop's clock, on the C engine
        await asyncio.sleep(0)
        limiter.try_acquire()  # a new task step: found running again
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a process with threads
            pid = os.fork()
        if pid == 0:
            answers = contextvars.copy_context().run(
                lambda: (limiter._running_loop(), asyncio.events._get_running_loop()))
            os._exit(0 if answers[0] is answers[1] else 1)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    assert asyncio.run(main()) == 0


ASYNCIO_IN_PYTHON = """
import asyncio, contextvars, sys
assert not hasattr(asyncio.events._get_running_loop, "__self__"), "asyncio's C accelerator was loaded"
import aiotb
assert aiotb.IMPLEMENTATION == sys.argv[1], aiotb.IMPLEMENTATION
limiter = aiotb.Limiter(1, 1, burst=1)
clock = [100.0]

def patched_loop():
    loop = asyncio.new_event_loop()
    real_time = loop.time
    start = real_time()
    loop.time = lambda: clock[0] + (real_time() - start)
    return loop

async def check():
    granted = [limiter.try_acquire()]
    await asyncio.sleep(0)
    named = limiter._running_loop() is asyncio.get_running_loop()
    clock[0] += 1.0  # a second on a patched loop's clock only
    granted.append(limiter.try_acquire())
    return named, granted

answers = []
for factory in (asyncio.new_event_loop, patched_loop):
    with asyncio.Runner(loop_factory=factory) as runner:
        answers.append(runner.run(check(), context=contextvars.copy_context()))
print(answers)
"""


def test_the_running_loop_is_named_when_asyncio_is_pure_python(lib: Any) -> None:
    """Without asyncio's C accelerator its running loop comes from a Python function, which the engine calls
    the generic way (it calls the accelerator's C function directly): the loop is named as asyncio names it,
    and a patched loop's clock is read."""
    script = "import sys; sys.modules['_asyncio'] = None\n" + ASYNCIO_IN_PYTHON
    environment = dict(os.environ, AIOTB_NO_EXTENSIONS="1" if lib.name == "python" else "0")
    done = subprocess.run([sys.executable, "-c", script, lib.name], capture_output=True, text=True, timeout=120,
                          env=environment)
    assert done.returncode == 0, done.stderr
    # The stock loop: named, and the second try refused (its clock moved by microseconds). The patched one:
    # named, and the second granted (its clock moved by the second the script added); the first was refused,
    # as the bucket is empty from the stock loop's grant (its clock rebased, not refilled).
    assert done.stdout.strip() == "[(True, [True, False]), (True, [False, True])]", done.stdout
