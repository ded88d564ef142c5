"""What the processes of benchmarks/redis_store.py run: importable by a process started with "spawn".

Roles (spec["role"]):

  round_trips  case 1: every contender (``contenders``) on its own client and connection, timed in
               alternating runs of sequential awaits, with the server's CPU time and the commands it
               ran (INFO commandstats) over each run;
  concurrent   case 1b: some contenders, each on its own client pinned to one connection, timed in
               alternating runs of C tasks calling together, for each C, with the same server figures;
  tasks        cases 2 and 3, described below;
  client       case 4: an aiohttp client through ``Limiter(rate, 1, burst=b, store=RedisStore(url, key))``,
               or through an in-process ``Limiter(rate, 1, burst=b)`` when spec["key"] is None; it
               connects (and loads the script) first, then receives the HTTP server's URL, says
               "ready" and sends shared_workers.send_all's requests from the start instant, each
               sent and read inside ``async with limiter:``;
  server       case 4's HTTP server: shared_workers.serve (tests/http_server.py's RateLimitedServer);
  lease_throughput  case 5a: ``async with`` and ``try_acquire()`` on a leased RedisStore and on the
               same store without lease=, each on its own client and key, timed in alternating runs
               of sequential awaits, with the server's figures over each run;
  lease_tasks  cases 5b and 5c: as a tasks worker, over a leased store that logs its lease calls
               (``LoggedLeaseStore``), its tasks starting ``delay_ns`` after the start instant; it
               sends back its use instants, the instant its tasks first asked, and its lease calls.

A tasks worker is a fresh process with one ``Limiter(rate, 1, burst=b, store=RedisStore(url, key))``
whose store and engine log what they did (``LoggedStore``, ``LoggedLimiter``). It connects and loads
the script, says "ready" on its pipe, receives the common start instant (CLOCK_MONOTONIC, ns), and
its tasks loop ``async with limiter:`` until the end instant, when they are cancelled. Each task
takes a request number as it asks and logs it, with its use instant (``time.monotonic_ns()``), the
first thing it does in the block. With ``offset_ns`` the process's ``time.time_ns`` as the store
reads it (``aiotb._store_redis.time``) is that far off: a client whose clock is wrong. It sends back
one dict of lists (see ``take_in_tasks``), or {"error": traceback}."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import os
import statistics
import sys
import time
from functools import partial
from typing import Any, Awaitable, Callable, cast

import shared_workers
from crew import run_role
from aiotb import RedisStore
from aiotb._redis_limiter import RedisLimiter
from aiotb._store import Reserved
from aiotb._store_redis import Lease, RedisLease, RedisRates

START_TIMEOUT = 120.0  # s a worker waits for its start instant
SPIN_NS = 2_000_000  # the last 2 ms before the start are spun, not slept: the loop's timer rounds to 1 ms
SERVER_EXIT_WITHIN = 2.0  # s for the task serving the limiter's queue to finish once its waiters are cancelled
WARMUP_CALLS = 300  # per contender before case 1's and 1b's runs: connections made, scripts loaded
ADMIN_COMMANDS = ("info", "config|resetstat")  # the measuring client's own, left out of INFO commandstats
LEAST_GCRA = """\
local now = redis.call('TIME')
now = now[1] * 1000000 + now[2]
local interval = tonumber(ARGV[1])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
redis.call('SET', KEYS[1], tat + interval, 'PX', math.floor((tat + interval - now) / 1000) + 1)
return tat - now
"""  # what any one-round-trip GCRA on the server's clock does: ARGV[1] us a token, no burst; the delay in us


class OffsetTime:
    """The ``time`` module as a store sees it, with ``time_ns()`` off by offset_ns; counts its calls."""

    def __init__(self, offset_ns: int) -> None:
        self.offset_ns = offset_ns
        self.calls = 0

    def time_ns(self) -> int:
        self.calls += 1
        return time.time_ns() + self.offset_ns

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class LoggedStore(RedisStore):
    """A RedisStore that logs every reservation the script made, whoever uses it: (the hash's epoch
    in us, F before, F after, the server's instant, ns from sending to the reply, CLOCK_MONOTONIC ns
    at the reply), the F's as the script's record has them, made absolute (ns since 1970 on the
    server's clock); and counts cancels."""

    __slots__ = ("reservations", "cancels")

    def __init__(self, redis: Any, key: str) -> None:
        super().__init__(redis, key)
        self.reservations: list[tuple[int, int, int, int, int, int]] = []
        self.cancels = 0

    def bind(self, rates: Any) -> LoggedRates:
        return LoggedRates(self, super().bind(rates).definition)


class LoggedRates(RedisRates):
    """The rates of a LoggedStore: each reservation and cancel logged on the store."""

    __slots__ = ()

    async def reserve(self, *args: Any, **kwargs: Any) -> Any:
        sent = time.monotonic_ns()
        reserved = await super().reserve(*args, **kwargs)
        self._log([reserved], sent)
        return reserved

    async def reserve_run(self, *args: Any, **kwargs: Any) -> Any:
        sent = time.monotonic_ns()
        first, more = await super().reserve_run(*args, **kwargs)
        self._log([first, *more], sent)
        return first, more

    def _log(self, answers: list[Any], sent: int) -> None:
        """Logs the reservations among the answers of one round trip sent at sent, replied now."""
        replied = time.monotonic_ns()
        log = cast("LoggedStore", self.store)
        for reserved in answers:
            if isinstance(reserved, Reserved):
                epoch, before, after = record_instants(reserved.record)
                log.reservations.append((epoch, before, after, reserved.at, replied - sent, replied))

    async def cancel(self, record: bytes) -> int:
        log = cast("LoggedStore", self.store)
        log.cancels += 1
        return await super().cancel(record)


class LoggedLimiter(RedisLimiter):
    """A limiter over a RedisStore that logs, for each grant in its order: the server's instant
    (ns since 1970), the reservation's F after (which ties it to the store's log), its instant on
    this process's CLOCK_MONOTONIC as the limiter set its timer (ns), and the real wall clock then."""

    __slots__ = ("grants", "afresh", "_granting")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grants: list[tuple[int, int, int, int]] = []
        self.afresh = 0  # grants of tokens taken afresh in place of a stale reservation
        self._granting: Any = None  # the reservation _granted is granting

    def _granted(self, slot: Any, now: float) -> None:
        self._granting = slot
        try:
            super()._granted(slot, now)
        finally:
            self._granting = None

    def _retaken(self, ident: int, fresh: Any, now: float) -> None:
        self.afresh += isinstance(fresh, Reserved)
        super()._retaken(ident, fresh, now)

    def _count_grant(self, amount: float, waited: float | None, reserved: Reserved) -> None:
        super()._count_grant(amount, waited, reserved)
        slot = self._granting
        # a reservation's grant, timed for its instant; a run's, due at the reply, or tokens taken afresh: now
        target = slot.at if slot is not None and slot.record is reserved else asyncio.get_running_loop().time()
        self.grants.append((reserved.at, record_instants(reserved.record)[2], round(target * 1e9), time.time_ns()))


def record_instants(record: bytes) -> tuple[int, int, int]:
    """A one-rate reservation's record (epoch in us, F before, F after in ns after it): the epoch,
    and the F's in ns since 1970 on the server's clock."""
    epoch, before, after = (int(word) for word in record.split()[:3])
    return epoch, epoch * 1000 + before, epoch * 1000 + after


def main(spec: dict[str, Any], conn: Any) -> None:
    """The process's entry point: runs spec's role, sends the result on conn."""
    run_role(ROLES, spec, conn)


def take_in_tasks(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["tasks"] tasks loop ``async with limiter`` from the start to the end instant. Returns the
    grants (LoggedLimiter.grants as columns), the uses (request number, use instant) in the order
    the tasks resumed, the store's reservations and cancels, and how often the offset clock was read."""
    import aiotb._store_redis

    clock = None
    if spec["offset_ns"]:
        clock = OffsetTime(spec["offset_ns"])
        setattr(aiotb._store_redis, "time", clock)  # the module the store reads time.time_ns() from
    out = asyncio.run(run_tasks(spec, conn))
    out.update(pid=os.getpid(), offset_ns=spec["offset_ns"], offset_reads=clock.calls if clock else None)
    return out


async def run_tasks(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    store = LoggedStore(spec["url"], spec["key"])
    limiter = LoggedLimiter(spec["rate"], 1, burst=spec["burst"], store=store)
    await limiter.read_tokens()  # connected, and the script loaded, before the start
    conn.send("ready")
    if not conn.poll(START_TIMEOUT):
        raise TimeoutError(f"no start instant within {START_TIMEOUT} s")
    start_ns = int(conn.recv())
    end_ns = start_ns + spec["duration_ns"]
    clock = time.monotonic_ns
    requests = itertools.count()
    uses: list[tuple[int, int]] = []

    async def take_forever() -> None:
        while True:
            number = next(requests)
            async with limiter:
                uses.append((number, clock()))

    ahead = start_ns - clock() - SPIN_NS
    if ahead > 0:
        await asyncio.sleep(ahead / 1e9)
    while clock() < start_ns:
        pass
    running = [asyncio.ensure_future(take_forever()) for _ in range(spec["tasks"])]
    await asyncio.sleep(max(0, end_ns - clock()) / 1e9)
    for task in running:
        task.cancel()
    for outcome in await asyncio.gather(*running, return_exceptions=True):
        if not isinstance(outcome, asyncio.CancelledError):
            raise RuntimeError("a task failed") from outcome
    deadline = clock() + int(SERVER_EXIT_WITHIN * 1e9)
    while limiter._trips and clock() < deadline:  # its last reservation, given back
        await asyncio.sleep(0.005)
    await store.redis.aclose()
    columns = list(zip(*limiter.grants)) or [(), (), (), ()]
    return {"start_ns": start_ns, "end_ns": end_ns,
            "grant_at": list(columns[0]), "grant_after": list(columns[1]), "grant_target": list(columns[2]),
            "grant_wall": list(columns[3]),
            "use_request": [number for number, _ in uses], "use_at": [at for _, at in uses],
            "reservations": store.reservations, "cancels": store.cancels, "afresh": limiter.afresh}


# ---- cases 1 and 1b: round trips on one connection ----

class Contender:
    """One call timed in case 1 or 1b: make() builds it on a running loop and returns the call; granted
    says whether an answer is a grant (every call should be one: the rates never bind)."""

    def __init__(self, key: str, label: str, group: str, make: Callable[[str], Awaitable[Callable[[], Any]]],
                 granted: Callable[[Any], bool] = lambda answer: True) -> None:
        self.key, self.label, self.group, self.make, self.granted = key, label, group, make, granted


def contenders(url: str, port: int, opened: list[Any], one_connection: bool = False) -> list[Contender]:
    """Everything cases 1 and 1b time; each builds its own client (named for CLIENT LIST) on the server,
    with one_connection pinned to one connection (``single_connection_client``: redis-py sends one
    command at a time on it, concurrent callers waiting for it under a lock). The redis.asyncio
    clients made here are added to opened, for the caller to close."""
    from redis.asyncio import Redis

    from aiotb import Limiter, RedisStore

    exchange: list[tuple[tuple[Any, ...], Any]] = []  # aiotb's arguments to its script, and the reply

    def client(name: str) -> Redis:
        redis = Redis.from_url(url, client_name=name, single_connection_client=one_connection)
        opened.append(redis)
        return redis

    async def aiotb_exchange() -> tuple[tuple[Any, ...], Any]:
        """The arguments and the reply of the EVALSHA of one try_acquire, as redis-py saw them."""
        if not exchange:
            redis = client("bench-exchange")
            execute = redis.execute_command

            async def recorded(*command: Any, **options: Any) -> Any:
                reply = await execute(*command, **options)
                if command[0] == "EVALSHA":
                    numkeys = int(command[2])
                    exchange.append((command[3 + numkeys:], reply))
                return reply

            redis.execute_command = recorded  # type: ignore[method-assign]
            limiter = Limiter(1e6, 1, burst=1e6, store=RedisStore(redis, "bench-exchange"))
            assert isinstance(limiter, RedisLimiter)
            await limiter.atry_acquire()
            await redis.aclose()
        return exchange[-1]

    async def script(name: str, body: str) -> Callable[[], Any]:
        """body sent as aiotb sends its script: EVALSHA through execute_command, with aiotb's arguments."""
        redis = client(name)
        sha = await redis.script_load(body)
        args, _ = await aiotb_exchange()
        return lambda: redis.execute_command("EVALSHA", sha, 1, "bench:script", *args)

    async def incr(name: str) -> Callable[[], Any]:
        redis = client(name)
        return lambda: redis.incr("bench:incr")

    async def returns_1(name: str) -> Callable[[], Any]:
        return await script(name, "return 1")

    async def aiotb_shaped(name: str) -> Callable[[], Any]:
        _, reply = await aiotb_exchange()
        return await script(name, f"return {lua_literal(reply)}")

    async def least_gcra(name: str) -> Callable[[], Any]:
        redis = client(name)
        sha = await redis.script_load(LEAST_GCRA)
        return lambda: redis.execute_command("EVALSHA", sha, 1, "bench:least_gcra", 1)

    def aiotb_limiter(name: str) -> RedisLimiter:
        limiter = Limiter(1e6, 1, burst=1e6, store=RedisStore(client(name), f"bench-{name}"))
        assert isinstance(limiter, RedisLimiter)
        return limiter

    async def aiotb_acquire(name: str) -> Callable[[], Any]:
        return aiotb_limiter(name).acquire

    async def aiotb_try(name: str) -> Callable[[], Any]:
        return aiotb_limiter(name).atry_acquire

    async def aiotb_reserve(name: str) -> Callable[[], Any]:
        limiter = aiotb_limiter(name)
        rates = limiter._store_rates  # what try_acquire calls
        return lambda: rates.reserve(1.0, 0)

    async def pyrate_log(name: str) -> Callable[[], Any]:
        from pyrate_limiter import Duration, Limiter as PyrateLimiter, Rate, RedisBucket

        bucket = await RedisBucket.init([Rate(1_000_000, Duration.SECOND)], client(name), f"bench:{name}")
        limiter = PyrateLimiter(bucket, buffer_ms=0)
        return lambda: limiter.try_acquire("bench", 1, blocking=False)

    async def pyrate_gcra(name: str) -> Callable[[], Any]:
        from pyrate_limiter import GCRA, Duration, Limiter as PyrateLimiter, Rate, RedisStateStore, StateBucket

        bucket = StateBucket([Rate(1_000_000, Duration.SECOND, burst=1_000_000)], GCRA(),
                             RedisStateStore(client(name), f"bench:{name}"))
        limiter = PyrateLimiter(bucket, buffer_ms=0)
        return lambda: limiter.try_acquire("bench", 1, blocking=False)

    def limits_hit(strategy: str, implementation: str | None) -> Callable[[str], Awaitable[Callable[[], Any]]]:
        async def make(name: str) -> Callable[[], Any]:
            from limits import RateLimitItemPerSecond
            from limits.aio import strategies
            from limits.aio.storage import RedisStorage

            options: dict[str, Any] = {"client_name": name}
            if implementation is not None:
                options["implementation"] = implementation
            if one_connection:  # redis-py's option: case 1b takes no coredis row
                options["single_connection_client"] = True
            storage = RedisStorage(f"async+redis://127.0.0.1:{port}/0", **options)
            limiter = getattr(strategies, strategy)(storage)
            item = RateLimitItemPerSecond(1_000_000)
            return lambda: limiter.hit(item, name)
        return make

    def true(answer: Any) -> bool:
        return answer is True

    return [
        Contender("incr", "`INCR` (redis.asyncio)", "reference", incr),
        Contender("returns_1", "EVALSHA of `return 1`, aiotb's arguments", "reference", returns_1),
        Contender("aiotb_shaped", "EVALSHA of a constant: aiotb's reply to a reserve, aiotb's arguments", "reference",
                  aiotb_shaped),
        Contender("least_gcra", "EVALSHA of the least GCRA script (`TIME`, `GET`, `SET PX`), 1 µs a token", "reference",
                  least_gcra, lambda delay: delay == 0),
        Contender("aiotb_acquire", "aiotb `await limiter.acquire()`", "aiotb", aiotb_acquire,
                  lambda answer: answer is None),
        Contender("aiotb_try", "aiotb `await limiter.atry_acquire()`", "aiotb", aiotb_try, true),
        Contender("aiotb_reserve", "aiotb `await rates.reserve(1.0, 0)` (the store call)", "aiotb",
                  aiotb_reserve, lambda answer: answer is not None),
        Contender("pyrate_log", "pyrate-limiter `RedisBucket` (sliding-window log)", "pyrate", pyrate_log, true),
        Contender("pyrate_gcra", "pyrate-limiter `StateBucket(GCRA)` on `RedisStateStore`", "pyrate", pyrate_gcra,
                  true),
        Contender("limits_moving", "limits moving window, `RedisStorage(implementation=\"redispy\")`", "limits",
                  limits_hit("MovingWindowRateLimiter", "redispy"), true),
        Contender("limits_fixed", "limits fixed window, `RedisStorage(implementation=\"redispy\")`", "limits",
                  limits_hit("FixedWindowRateLimiter", "redispy"), true),
        Contender("limits_moving_coredis", "limits moving window on coredis (its default client)", "other client",
                  limits_hit("MovingWindowRateLimiter", None), true),
        Contender("limits_fixed_coredis", "limits fixed window on coredis (its default client)", "other client",
                  limits_hit("FixedWindowRateLimiter", None), true),
    ]


def lua_literal(reply: Any) -> str:
    """A script reply (a string, an integer or an array of them) as a Lua expression."""
    if isinstance(reply, list):
        return "{" + ", ".join(lua_literal(value) for value in reply) + "}"
    if isinstance(reply, bytes):
        return "'" + reply.decode().replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(int(reply))


async def timed(call: Callable[[], Any], granted: Callable[[Any], bool], count: int) -> tuple[float, int]:
    """count sequential awaits of call(): calls per second, and how many answers were not grants."""
    clock = time.perf_counter_ns
    refused = 0
    started = clock()
    for _ in range(count):
        if not granted(await call()):
            refused += 1
    return count * 1e9 / (clock() - started), refused


async def timed_together(call: Callable[[], Any], granted: Callable[[Any], bool], count: int,
                         tasks: int) -> tuple[float, int]:
    """tasks tasks together, each awaiting call() count // tasks times in turn: calls per second in
    all, and how many answers were not grants."""
    clock = time.perf_counter_ns
    refused = 0

    async def caller() -> None:
        nonlocal refused
        for _ in range(count // tasks):
            if not granted(await call()):
                refused += 1

    started = clock()
    await asyncio.gather(*(caller() for _ in range(tasks)))
    return count // tasks * tasks * 1e9 / (clock() - started), refused


async def server_cpu_s(admin: Any) -> float:
    """The server's CPU seconds so far (user + system), as INFO reports them."""
    info = await admin.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def sent_commands(admin: Any) -> tuple[int, int]:
    """The commands the clients sent since CONFIG RESETSTAT, as INFO commandstats counts them: their
    number and the server's µs executing them. EVALSHA's where there are scripts (the commands a
    script calls are counted apart, their time inside its), else every command's but the admin's."""
    stats = {key.removeprefix("cmdstat_"): value for key, value in (await admin.info("commandstats")).items()}
    if "evalsha" in stats:
        return int(stats["evalsha"]["calls"]), int(stats["evalsha"]["usec"])
    sent = [value for name, value in stats.items() if name not in ADMIN_COMMANDS]
    return sum(int(value["calls"]) for value in sent), sum(int(value["usec"]) for value in sent)


async def on_server(admin: Any, timing: Callable[[], Awaitable[tuple[float, int]]],
                    count: int) -> tuple[float, int, dict[str, float]]:
    """timing() of count calls (calls per second, answers not grants), and the server's figures per
    call over it: its CPU µs (INFO cpu), and the commands sent and its µs executing them (INFO
    commandstats, reset first)."""
    await admin.config_resetstat()
    cpu = await server_cpu_s(admin)
    rate, refused = await timing()
    cpu_us = (await server_cpu_s(admin) - cpu) * 1e6 / count
    commands, usec = await sent_commands(admin)
    return rate, refused, {"server_us": cpu_us, "exec_us": usec / count, "commands": commands / count}


Built = list[tuple[Contender, str, Callable[[], Any]]]  # each contender, its client's name, its call
Timing = Callable[[Callable[[], Any], Callable[[Any], bool], int], Awaitable[tuple[float, int]]]


async def warmed(url: str, port: int, prefix: str, opened: list[Any], keys: list[str] | None = None,
                 one_connection: bool = False) -> Built:
    """The contenders of keys (every one if None), each built on its client, named prefix + its key,
    after WARMUP_CALLS sequential calls; the redis.asyncio clients made are added to opened."""
    built = []
    for c in contenders(url, port, opened, one_connection):
        if keys is None or c.key in keys:
            call = await c.make(prefix + c.key)
            _, refused = await timed(call, c.granted, WARMUP_CALLS)
            if refused:
                raise RuntimeError(f"{c.key}: {refused} of {WARMUP_CALLS} warm-up calls refused")
            built.append((c, prefix + c.key, call))
    return built


async def alternate(admin: Any, built: Built, runs: int, count: int, timing: Timing, case: str) -> dict[str, Any]:
    """runs runs of count calls of every built contender, timing(call, granted, count) each, the order
    rotated by one each run, with the server's figures over each; a row per contender (medians), and
    its connections as the server's CLIENT LIST has them after."""
    figures = ("runs", "server_us", "exec_us", "commands")
    measured: dict[str, dict[str, list[float]]] = {c.key: {name: [] for name in figures} for c, _, _ in built}
    refused_in_runs = {c.key: 0 for c, _, _ in built}
    for run in range(runs):
        shift = run % len(built)
        for c, _, call in built[shift:] + built[:shift]:
            rate, refused, server = await on_server(admin, partial(timing, call, c.granted, count), count)
            measured[c.key]["runs"].append(rate)
            for name, value in server.items():
                measured[c.key][name].append(value)
            refused_in_runs[c.key] += refused
        progress(f"{case}, run {run + 1}/{runs}: " + ", ".join(f"{key} {m['runs'][-1]:,.0f}"
                                                              for key, m in measured.items()))
    clients = await admin.client_list()
    rows = {}
    for c, name, _ in built:
        m = measured[c.key]
        rows[c.key] = {"label": c.label, "group": c.group, "runs": m["runs"], "median": median(m["runs"]),
                       "server_us": median(m["server_us"]), "server_us_runs": m["server_us"],
                       "exec_us": median(m["exec_us"]), "exec_us_runs": m["exec_us"],
                       "commands": median(m["commands"]), "refused": refused_in_runs[c.key],
                       "connections": sum(1 for entry in clients if entry.get("name") == name)}
    return rows


async def time_round_trips(url: str, port: int, runs: int, count: int) -> dict[str, Any]:
    """Case 1: every contender, runs alternating runs of count sequential calls; the server's figures
    during each, and its view of the clients."""
    from redis.asyncio import Redis

    admin = Redis.from_url(url, client_name="bench-admin")
    server = (await admin.info("server"))["redis_version"]
    opened: list[Any] = [admin]
    built = await warmed(url, port, "bench-", opened)
    rows = await alternate(admin, built, runs, count, timed, "case 1")
    for redis in opened:
        await redis.aclose()
    return {"runs": runs, "calls": count, "warmup": WARMUP_CALLS, "redis_server": server, "contenders": rows}


async def time_concurrent(url: str, port: int, runs: int, count: int, levels: list[int],
                          keys: list[str]) -> dict[str, Any]:
    """Case 1b: the contenders of keys on clients pinned to one connection; for each number of tasks
    in levels, runs alternating runs of count calls made by that many tasks together (count // tasks
    each); the server's figures during each, and its view of the clients."""
    from redis.asyncio import Redis

    admin = Redis.from_url(url, client_name="bench-admin")
    opened: list[Any] = [admin]
    built = await warmed(url, port, "bench-1b-", opened, keys, one_connection=True)
    out = []
    for tasks in levels:
        calls = count // tasks * tasks
        rows = await alternate(admin, built, runs, calls, partial(timed_together, tasks=tasks),
                               f"case 1b, {tasks} tasks")
        out.append({"tasks": tasks, "calls": calls, "contenders": rows})
    for redis in opened:
        await redis.aclose()
    return {"runs": runs, "warmup": WARMUP_CALLS, "levels": out}


def round_trips(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    return asyncio.run(time_round_trips(spec["url"], spec["port"], spec["runs"], spec["calls"]))


def concurrent(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    return asyncio.run(time_concurrent(spec["url"], spec["port"], spec["runs"], spec["calls"], spec["tasks"],
                                       spec["contenders"]))


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# ---- case 4: an HTTP client ----

def send_requests(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["requests"] requests started together through the process's limiter: the statuses."""
    return asyncio.run(send_through_limiter(spec, conn))


async def send_through_limiter(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    from aiotb import Limiter

    importlib.import_module("aiohttp")  # imported before the start, as the other processes start

    store = None if spec["key"] is None else RedisStore(spec["redis_url"], spec["key"])
    limiter = Limiter(spec["rate"], 1, burst=spec["burst"], store=store)
    if isinstance(limiter, RedisLimiter):
        await limiter.read_tokens()  # connected, and the script loaded, before the start
    if not conn.poll(START_TIMEOUT):
        raise TimeoutError(f"no server URL within {START_TIMEOUT} s")
    url = conn.recv()
    start_ns = shared_workers.released(spec, conn)
    statuses = await shared_workers.send_all(limiter, url, spec["requests"], start_ns)
    if store is not None:
        await store.redis.aclose()
    return {"pid": os.getpid(), "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))}}


# ---- case 5: the lease mode ----

class LoggedLeaseStore(RedisStore):
    """A leased RedisStore that logs each lease call its limiter made: (CLOCK_MONOTONIC ns as it was
    sent, as it was answered, units kept, units wanted, units held after, fair share, 1 if the
    holder had no lease before); and counts the calls that gave every unit back."""

    __slots__ = ("leases", "releases")

    def __init__(self, redis: Any, key: str, lease: float, units: int) -> None:
        super().__init__(redis, key, lease=lease, units=units)
        self.leases: list[tuple[int, int, int, int, int, int, int]] = []
        self.releases = 0

    def bind_lease(self, rates: Any) -> LoggedLease:
        return LoggedLease(self, super().bind_lease(rates).definition)


class LoggedLease(RedisLease):
    """The lease of a LoggedLeaseStore: each lease call logged on the store."""

    __slots__ = ()

    async def lease_units(self, holder: str, have: int, want: int, give_back: float, owed: float) -> Lease:
        sent = time.monotonic_ns()
        lease = await super().lease_units(holder, have, want, give_back, owed)
        log = cast("LoggedLeaseStore", self.store)
        log.leases.append((sent, time.monotonic_ns(), have, want, lease.units, lease.share, int(lease.fresh)))
        return lease

    async def release_units(self, holder: str, give_back: float, owed: float) -> None:
        log = cast("LoggedLeaseStore", self.store)
        log.releases += 1
        await super().release_units(holder, give_back, owed)


def take_leased(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    """spec["tasks"] tasks loop ``async with limiter`` over a leased store, from delay_ns after the
    start instant to the end instant."""
    return asyncio.run(run_leased_tasks(spec, conn))


async def run_leased_tasks(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    from aiotb import Limiter, RedisLeaseLimiter

    store = LoggedLeaseStore(spec["url"], spec["key"], spec["lease"], spec["units"])
    limiter = Limiter(spec["rate"], 1, burst=spec["burst"], store=store)
    if not isinstance(limiter, RedisLeaseLimiter):
        raise TypeError(f"a leased store made a {type(limiter).__name__}")
    await store.redis.ping()  # connected before the start; the first lease call is the limiter's
    start_ns = shared_workers.released(spec, conn)
    end_ns = start_ns + spec["duration_ns"]
    clock = time.monotonic_ns
    uses: list[int] = []

    async def take_forever() -> None:
        while True:
            async with limiter:
                uses.append(clock())

    await shared_workers.wait_until(start_ns + spec["delay_ns"])
    first_call_ns = clock()
    running = [asyncio.ensure_future(take_forever()) for _ in range(spec["tasks"])]
    await asyncio.sleep(max(0, end_ns - clock()) / 1e9)
    units_at_end = limiter.units
    for task in running:
        task.cancel()
    for outcome in await asyncio.gather(*running, return_exceptions=True):
        if not isinstance(outcome, asyncio.CancelledError):
            raise RuntimeError("a task failed") from outcome
    await limiter.aclose()
    await store.redis.aclose()
    return {"pid": os.getpid(), "start_ns": start_ns, "end_ns": end_ns, "first_call_ns": first_call_ns,
            "use_at": uses, "leases": store.leases, "releases": store.releases, "units_at_end": units_at_end}


async def entered(limiter: Any, count: int) -> tuple[float, int]:
    """count sequential ``async with limiter: pass``: entries per second, and 0 refused."""
    clock = time.perf_counter_ns
    started = clock()
    for _ in range(count):
        async with limiter:
            pass
    return count * 1e9 / (clock() - started), 0


async def time_leased(url: str, runs: int, calls: int, lease_calls: int, span: float, units: int) -> dict[str, Any]:
    """Case 5a: ``async with`` and ``try_acquire()`` on ``Limiter(1e6, 1, burst=1e6)`` over a leased
    store (a LoggedLeaseStore) and over the same store without lease=, each on its own client and
    key; runs runs, the order rotated by one each run, of lease_calls calls on a leased limiter and
    calls on the other. Every leased limiter gives its units back (aclose) before each run: no
    keeper but the timed limiter's runs during a run, and each leased run starts with no units.
    A row per call (medians), with each run's EVALSHA calls and its lease calls' answers."""
    from redis.asyncio import Redis

    from aiotb import Limiter, RedisLeaseLimiter

    admin = Redis.from_url(url, client_name="bench-admin")
    opened: list[Any] = [admin]

    def limiter(name: str, leased: bool) -> Any:
        redis = Redis.from_url(url, client_name=name)
        opened.append(redis)
        store = LoggedLeaseStore(redis, name, span, units) if leased else RedisStore(redis, name)
        made = Limiter(1e6, 1, burst=1e6, store=store)
        if not isinstance(made, RedisLeaseLimiter if leased else RedisLimiter):
            raise TypeError(f"{name}: a {type(made).__name__}")
        return made

    def true(answer: Any) -> bool:
        return answer is True

    rows: list[tuple[str, str, bool, Callable[[Any, int], Awaitable[tuple[float, int]]]]] = [
        ("lease_enter", f"`async with`, `RedisStore(client, key, lease={span:g}, units={units})`", True, entered),
        ("one_enter", "`async with`, `RedisStore(client, key)` (one round trip a grant)", False, entered),
        ("lease_try", f"`await atry_acquire()`, `RedisStore(client, key, lease={span:g}, units={units})`", True,
         lambda made, count: timed(made.atry_acquire, true, count)),
        ("one_try", "`await atry_acquire()`, `RedisStore(client, key)` (one round trip a grant)", False,
         lambda made, count: timed(made.atry_acquire, true, count)),
    ]
    made = {key: limiter(f"bench-5a-{key}", leased) for key, _, leased, _ in rows}
    leased = [made[key] for key, _, is_leased, _ in rows if is_leased]
    for key, _, _, timing in rows:
        await timing(made[key], WARMUP_CALLS)
    figures = ("runs", "grants", "server_us", "exec_us", "evalsha", "refused")
    measured: dict[str, dict[str, list[Any]]] = {key: {name: [] for name in figures + ("leases",)}
                                                 for key, *_ in rows}
    for run in range(runs):
        shift = run % len(rows)
        for key, _, is_leased, timing in rows[shift:] + rows[:shift]:
            for each in leased:
                await each.aclose()
            count = lease_calls if is_leased else calls
            logged = made[key].store.leases if is_leased else []
            before = len(logged)
            rate, refused, server = await on_server(admin, partial(timing, made[key], count), count)
            m = measured[key]
            m["runs"].append(rate)
            m["grants"].append(rate * (count - refused) / count)
            m["server_us"].append(server["server_us"])
            m["exec_us"].append(server["exec_us"])
            m["evalsha"].append(round(server["commands"] * count))  # EVALSHA's calls: every run makes one at least
            m["refused"].append(refused)
            m["leases"].append([list(lease) for lease in logged[before:]])
        progress(f"case 5a, run {run + 1}/{runs}: " + ", ".join(f"{key} {m['runs'][-1]:,.0f}"
                                                               for key, m in measured.items()))
    for each in leased:
        await each.aclose()
    clients = await admin.client_list()
    out = {}
    for key, label, is_leased, _ in rows:
        m = measured[key]
        out[key] = {"label": label, "leased": is_leased, "calls": lease_calls if is_leased else calls,
                    "runs": m["runs"], "median": median(m["runs"]), "grants_runs": m["grants"],
                    "grants_median": median(m["grants"]), "server_us": median(m["server_us"]),
                    "exec_us": median(m["exec_us"]), "evalsha_runs": m["evalsha"], "refused_runs": m["refused"],
                    "refused": sum(m["refused"]), "leases_runs": m["leases"],
                    "connections": sum(1 for entry in clients if entry.get("name") == f"bench-5a-{key}")}
    for redis in opened:
        await redis.aclose()
    return {"runs": runs, "calls": calls, "lease_calls": lease_calls, "lease": span, "units": units,
            "warmup": WARMUP_CALLS, "rows": out}


def lease_throughput(spec: dict[str, Any], conn: Any) -> dict[str, Any]:
    return asyncio.run(time_leased(spec["url"], spec["runs"], spec["calls"], spec["lease_calls"], spec["lease"],
                                   spec["units"]))


ROLES: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
    "round_trips": round_trips,
    "concurrent": concurrent,
    "tasks": take_in_tasks,
    "client": send_requests,
    "server": shared_workers.serve,
    "lease_throughput": lease_throughput,
    "lease_tasks": take_leased,
}
