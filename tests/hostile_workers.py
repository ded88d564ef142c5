"""The limiter's side of tests/test_hostile_neighbour.py, run as a child process (``python hostile_workers.py
ROLE JSON``), so that a signal that kills it (SIGBUS, SIGSEGV) is seen as its death, not the test runner's.

``join``: builds the limiter and prints what came of it, one JSON line. ``use``: builds the limiter, prints
``ready``, waits for a line on stdin, then uses it for the given seconds (``sync``: try_acquire, tokens and
has_capacity in turn; ``async``: tasks in ``async with``), timing every synchronous call, and prints one JSON
line: the instants the segment counted its grants at, how many calls were refused or raised StoreCorrupt, the
first StoreCorrupt's message, and the longest call. ``paused``: what a limiter says while its segment is
paused far ahead."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Callable

from aiotb import Limiter, SharedMemoryStore, StoreCorrupt
from aiotb._tokenbucket import SHM_ETOOLATE, SHM_OK
from shm_workers import LoggedLimiter


class CheckedLimiter(LoggedLimiter):
    """A LoggedLimiter whose takes raise StoreCorrupt for a corrupt segment, as the engine's own do (the
    logging take of shm_workers counts any status but SHM_OK as tokens not free)."""

    __slots__ = ()

    def _take_at_once(self, amount: float) -> bool:
        if self._fair and self._queue:
            return False
        now = self._segment.now()
        status = self._segment.take_now(amount, now)
        if status not in (SHM_OK, SHM_ETOOLATE):
            raise StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it (status {status})")
        if status == SHM_OK:
            self.counted.append(now)
            self.made.append(now)
        return status == SHM_OK


def store(args: dict[str, Any]) -> SharedMemoryStore:
    trusted = {"trusted_uids": args["trusted"]} if "trusted" in args else {}
    return SharedMemoryStore(args["name"], mode=args.get("mode", 0o600), **trusted)


def join(args: dict[str, Any]) -> dict[str, Any]:
    try:
        limiter = Limiter(args["rate"], 1, burst=args["burst"], store=store(args))
    except (PermissionError, StoreCorrupt, ValueError) as error:
        return {"outcome": type(error).__name__, "message": str(error)}
    return {"outcome": "joined", "granted": limiter.try_acquire()}


def use(args: dict[str, Any]) -> dict[str, Any]:
    limiter = CheckedLimiter(args["rate"], 1, burst=args["burst"], store=store(args))
    limiter.counted, limiter.made = [], []
    print("ready", flush=True)
    sys.stdin.readline()
    log: dict[str, Any] = {"refused": 0, "corrupt": 0, "corrupt_message": None, "longest_ns": 0, "calls": 0}

    def corrupt(error: StoreCorrupt) -> None:
        log["corrupt"] += 1
        log["corrupt_message"] = log["corrupt_message"] or str(error)

    stop = time.monotonic() + args["seconds"]
    if args["how"] == "sync":
        calls: list[Callable[[], object]] = [limiter.try_acquire, lambda: limiter.tokens, limiter.has_capacity]
        while time.monotonic() < stop:
            for call in calls:
                started = time.monotonic_ns()
                try:
                    if call() is False:
                        log["refused"] += 1
                except StoreCorrupt as error:
                    corrupt(error)
                log["longest_ns"] = max(log["longest_ns"], time.monotonic_ns() - started)
                log["calls"] += 1
    else:
        async def task() -> None:
            while time.monotonic() < stop:
                try:
                    async with limiter:
                        pass
                except StoreCorrupt as error:
                    corrupt(error)
                    await asyncio.sleep(0.001)  # a failing store answers at once: let the other tasks run
                except TimeoutError:  # rate words moved past the furthest instant a reservation may reach
                    log["stranded"] = log.get("stranded", 0) + 1
                    await asyncio.sleep(0.001)
                log["calls"] += 1

        async def tasks() -> None:
            await asyncio.gather(*(task() for _ in range(args["tasks"])))

        asyncio.run(tasks())
    log["counted"] = limiter.counted
    return log


def paused(args: dict[str, Any]) -> dict[str, Any]:
    limiter = Limiter(args["rate"], 1, burst=args["burst"], store=store(args))
    said: dict[str, Any] = {"try_acquire": limiter.try_acquire(), "tokens": limiter.tokens,
                            "has_capacity": limiter.has_capacity()}

    async def acquire() -> None:
        await limiter.acquire(1, timeout=args["timeout"])

    started = time.monotonic()
    try:
        asyncio.run(acquire())
    except TimeoutError:
        said["acquire"] = "TimeoutError"
    else:
        said["acquire"] = "granted"
    said["acquire_s"] = time.monotonic() - started
    return said


if __name__ == "__main__":
    role, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"join": join, "use": use, "paused": paused}[role](arguments)), flush=True)
