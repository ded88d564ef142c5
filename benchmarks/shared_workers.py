"""What the processes of benchmarks/shared.py run: importable by a process started with "spawn".

Each worker is a fresh process. It builds its limiter (joining the shared segment by name), says
"ready" on its pipe, receives the common start instant (CLOCK_MONOTONIC, ns) and runs one role
until the end instant; a replacement worker is given the start instant in its spec and runs at
once. It sends back one dict, what it measured, or {"error": traceback}. Roles (spec["role"]):

  tasks        spec["tasks"] asyncio tasks loop ``async with limiter`` until the end instant, when
               they are cancelled; the first thing each does in the block is log its use instant
               (time.monotonic_ns()) in a GrantLog, a memory-mapped file that outlives a SIGKILL;
  try          try_acquire() as fast as it can; time.monotonic_ns() after each success, into a
               preallocated array('q') written to a file at the end;
  pyrate       pyrate-limiter's non-blocking try_acquire on a MultiprocessBucket the parent shares;
  uncontended  ns per uncontended ``async with`` on a shared store and on an in-process limiter;
  client       an aiohttp session: requests started together, each sent and read in ``async with``;
  server       tests/http_server.py's rate-limited server, until the parent says stop."""

from __future__ import annotations

import asyncio
import mmap
import os
import sys
import time
from array import array
from pathlib import Path
from typing import Any, Callable

from crew import run_role

START_TIMEOUT = 120.0  # s a worker waits for its start instant
SPIN_NS = 2_000_000  # the last 2 ms before an instant are spun, not slept: the loop's timer rounds to 1 ms
BATCH = 256  # calls between two readings of the clock when calling as fast as possible
PYRATE_NAME = "bench"


def main(spec: dict[str, Any], conn: Any) -> None:
    """The process's entry point: runs spec's role, sends its result on conn."""
    run_role(ROLES, spec, conn)


def released(spec: dict[str, Any], conn: Any) -> int:
    """The common start instant: sent by the parent once every worker is ready, or in the spec."""
    if spec.get("start_ns") is not None:
        return int(spec["start_ns"])
    conn.send("ready")
    if not conn.poll(START_TIMEOUT):
        raise TimeoutError(f"no start instant within {START_TIMEOUT} s")
    return int(conn.recv())


def spin_until(instant_ns: int) -> None:
    """Returns at instant_ns: sleeps, then spins the last SPIN_NS."""
    clock = time.monotonic_ns
    ahead = instant_ns - clock() - SPIN_NS
    if ahead > 0:
        time.sleep(ahead / 1e9)
    while clock() < instant_ns:
        pass


async def wait_until(instant_ns: int) -> None:
    """spin_until on a running loop."""
    ahead = instant_ns - time.monotonic_ns() - SPIN_NS
    if ahead > 0:
        await asyncio.sleep(ahead / 1e9)
    spin_until(instant_ns)


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def limiter_of(spec: dict[str, Any]) -> Any:
    """``Limiter(rate, 1, burst=burst)``, on spec["segment"]'s shared store unless that is None."""
    from aiotb import Limiter, SharedMemoryStore

    if spec.get("segment") is None:
        return Limiter(spec["rate"], 1, burst=spec["burst"])
    return Limiter(spec["rate"], 1, burst=spec["burst"], store=SharedMemoryStore(spec["segment"]))


class GrantLog:
    """Use instants (ns) in a file mapped into memory as int64: slot 0 holds the count, written after
    the instant, so that whatever a process killed with SIGKILL had logged is there, whole."""

    def __init__(self, path: str, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self.overflow = 0  # instants that found the log full
        with open(path, "w+b") as file:
            file.truncate((capacity + 1) * 8)
            self._map = mmap.mmap(file.fileno(), (capacity + 1) * 8)
        self.slots = memoryview(self._map).cast("q")

    def append(self, at: int) -> None:
        n = self.count + 1
        if n > self.capacity:
            self.overflow += 1
            return
        self.slots[n] = at
        self.slots[0] = n
        self.count = n

    def close(self) -> None:
        self.slots.release()
        self._map.close()


# ---- roles ----

def take_in_tasks(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["tasks"] tasks loop ``async with limiter`` from the start to the end instant."""
    limiter = limiter_of(spec)
    log = GrantLog(spec["log"], spec["capacity"])
    start_ns = released(spec, conn)
    loop = new_loop(spec.get("loop", "asyncio"))
    try:
        cpu_s = loop.run_until_complete(take_until(limiter, spec["tasks"], log, start_ns,
                                                   start_ns + spec["duration_ns"]))
    finally:
        loop.close()
        log.close()
    return {"pid": os.getpid(), "cpu_s": cpu_s, "logged": log.count, "overflow": log.overflow,
            "granted": limiter.stats().granted}


async def take_until(limiter: Any, tasks: int, log: GrantLog, start_ns: int, end_ns: int) -> float:
    """Runs the tasks from start_ns, cancels them at end_ns; the process's CPU seconds in between."""
    clock = time.monotonic_ns
    append = log.append

    async def take_forever() -> None:
        while True:
            async with limiter:
                append(clock())

    await wait_until(start_ns)
    cpu_start = time.process_time()
    running = [asyncio.ensure_future(take_forever()) for _ in range(tasks)]
    await asyncio.sleep(max(0, end_ns - clock()) / 1e9)
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    return time.process_time() - cpu_start


def spin(attempt: Callable[[], bool], log: array[int], stop_ns: int) -> tuple[int, int, int]:
    """Calls attempt() as fast as it can until stop_ns, the instant after each success in log: the
    calls, the successes logged, and those that found the log full."""
    clock = time.monotonic_ns
    room = len(log) - BATCH
    calls = logged = unlogged = 0
    while logged <= room:
        for _ in range(BATCH):
            if attempt():
                log[logged] = clock()
                logged += 1
        calls += BATCH
        if clock() >= stop_ns:
            return calls, logged, 0
    while clock() < stop_ns:
        for _ in range(BATCH):
            if attempt():
                unlogged += 1
        calls += BATCH
    return calls, logged, unlogged


def try_as_fast(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """try_acquire() as fast as possible for spec["duration_ns"]; the granted instants to spec["log"]."""
    limiter = limiter_of(spec)
    log = array("q", [0]) * spec["capacity"]
    start_ns = released(spec, conn)
    spin_until(start_ns)
    calls, logged, unlogged = spin(limiter.try_acquire, log, start_ns + spec["duration_ns"])
    ended = time.monotonic_ns()
    with open(spec["log"], "wb") as file:
        file.write(memoryview(log)[:logged])
    return {"pid": os.getpid(), "calls": calls, "grants": logged + unlogged, "unlogged": unlogged,
            "elapsed_ns": ended - start_ns}


def pyrate_as_fast(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """pyrate-limiter's non-blocking try_acquire on the shared bucket, as fast as possible."""
    from pyrate_limiter import Limiter as PyrateLimiter

    limiter = PyrateLimiter(spec["bucket"], buffer_ms=0)

    def attempt() -> bool:
        return bool(limiter.try_acquire(PYRATE_NAME, 1, blocking=False))

    log = array("q", [0]) * spec["capacity"]
    start_ns = released(spec, conn)
    spin_until(start_ns)
    calls, logged, unlogged = spin(attempt, log, start_ns + spec["duration_ns"])
    return {"pid": os.getpid(), "calls": calls, "grants": logged + unlogged,
            "elapsed_ns": time.monotonic_ns() - start_ns}


async def ns_per_with(limiter: Any, count: int) -> float:
    """Wall ns per uncontended ``async with limiter`` over count blocks."""
    clock = time.perf_counter_ns
    started = clock()
    for _ in range(count):
        async with limiter:
            pass
    return (clock() - started) / count


def time_uncontended(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["runs"] runs of spec["count"] blocks on each limiter, alternating which goes first."""
    limiters = {"shared": limiter_of(spec), "in-process": limiter_of({**spec, "segment": None})}
    released(spec, conn)
    loop = new_loop(spec["loop"])
    runs: dict[str, list[float]] = {key: [] for key in limiters}
    try:
        for limiter in limiters.values():  # warm up
            loop.run_until_complete(ns_per_with(limiter, spec["count"] // 10))
        for run in range(spec["runs"]):
            for key in (list(limiters) if run % 2 else list(limiters)[::-1]):
                runs[key].append(loop.run_until_complete(ns_per_with(limiters[key], spec["count"])))
    finally:
        loop.close()
    return {"pid": os.getpid(), "loop": spec["loop"], "runs": runs}


def send_requests(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["requests"] requests started together, each sent and read inside ``async with limiter``."""
    limiter = limiter_of(spec)
    start_ns = released(spec, conn)
    statuses = asyncio.run(send_all(limiter, spec["url"], spec["requests"], start_ns))
    return {"pid": os.getpid(), "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))}}


async def send_all(limiter: Any, url: str, count: int, start_ns: int) -> list[int]:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def send() -> int:
            async with limiter:
                async with session.get(url) as response:
                    await response.read()
                    return int(response.status)

        await wait_until(start_ns)
        return list(await asyncio.gather(*(send() for _ in range(count))))


def serve(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """Sends the server's URL, serves until the parent sends anything; what arrived, as
    [[time.monotonic(), status], ...]."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from http_server import RateLimitedServer

    async def run() -> list[list[float]]:
        async with RateLimitedServer(**spec["server"]) as server:
            conn.send(server.url)
            told = await asyncio.get_running_loop().run_in_executor(None, conn.poll, spec["timeout"])
            if told:
                conn.recv()
            return [[arrival.at, arrival.status] for arrival in server.arrivals]

    return {"pid": os.getpid(), "arrivals": asyncio.run(run())}


ROLES: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
    "tasks": take_in_tasks,
    "try": try_as_fast,
    "pyrate": pyrate_as_fast,
    "uncontended": time_uncontended,
    "client": send_requests,
    "server": serve,
}
