"""A limiter over a RedisStore serves the event loop it was first used on: calls from other threads and loops
wait there. When that loop stops (not closed) before such a call is done, the call fails with RuntimeError
within a second or so, cancelled there, rather than wait for a loop that may never run again. Real threads, real
loops, a real redis-server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import aiotb
import pytest
from aiotb._remote import STOPPED, STOPPED_CHECK

WITHIN_S = 30  # s: a thread's join, far above what a loaded machine needs


def served_then_stopped(redis_url: str, key: str) -> tuple[aiotb.Limiter, asyncio.AbstractEventLoop, threading.Event,
                                                                threading.Thread]:
    """A limiter of one token an hour, its token taken on a loop that runs in a thread until the returned event
    is set, then stops (not closed)."""
    limiter = aiotb.Limiter(1, 3600, burst=1, store=aiotb.RedisStore(redis_url, key))
    loop = asyncio.new_event_loop()
    serving, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        await limiter.acquire()  # the limiter now serves this loop, and has no token left
        serving.set()
        while not stop.is_set():
            await asyncio.sleep(0.01)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    assert serving.wait(WITHIN_S)
    return limiter, loop, stop, thread


def close(limiter: aiotb.Limiter, loop: asyncio.AbstractEventLoop) -> None:
    """Runs the stopped loop again: the cancelled call leaves the queue there, and the client closes."""
    async def settle() -> int:
        for _ in range(500):
            if not limiter.waiting and not limiter._trips:  # the give-back's round trip done too
                break
            await asyncio.sleep(0.01)
        waiting = limiter.waiting
        await limiter.store.redis.aclose()
        return waiting

    assert loop.run_until_complete(settle()) == 0
    loop.close()


@pytest.mark.parametrize("how", ["blocking thread", "another loop"])
def test_a_call_waiting_on_a_loop_that_stops_fails_instead_of_hanging(redis_url: str, how: str) -> None:
    limiter, loop, stop, server = served_then_stopped(redis_url, f"stopped-{how}")
    outcome: list[object] = []

    def wait() -> None:
        try:
            if how == "blocking thread":
                limiter.acquire_blocking(1)  # due in an hour, queued on the serving loop
            else:
                asyncio.run(limiter.acquire(1))
            outcome.append("granted")
        except RuntimeError as error:
            outcome.append((str(error), time.monotonic()))

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + WITHIN_S
    while not limiter.waiting and time.monotonic() < deadline:  # queued there
        time.sleep(0.01)
    assert limiter.waiting == 1
    stop.set()
    server.join(WITHIN_S)
    stopped_at = time.monotonic()
    waiter.join(WITHIN_S)
    assert not waiter.is_alive() and len(outcome) == 1 and outcome[0] != "granted", outcome
    message, failed_at = outcome[0]  # type: ignore[misc]
    assert message == STOPPED
    assert failed_at - stopped_at < 2 * STOPPED_CHECK + 5  # two checks, and a loaded machine's slack
    close(limiter, loop)


def test_a_with_block_over_redis_leaves_without_a_trip_to_the_loop(redis_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket's `with limiter:` gives nothing back at its exit, so the exit does not wait on the serving loop."""
    limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(redis_url, "with-exit"))
    trips: list[str] = []
    block_on = type(limiter)._block_on

    def counted(self: Any, call: Any, what: str) -> None:
        trips.append(what)
        block_on(self, call, what)

    monkeypatch.setattr(type(limiter), "_block_on", counted)
    with limiter:
        pass
    assert trips == ["`with limiter:`"]  # the entry's only
    assert limiter.stats().granted == 1
    served = limiter._loop
    assert served is not None
    asyncio.run_coroutine_threadsafe(limiter.store.redis.aclose(), served).result(WITHIN_S)
