"""One suite, two engines: every test that takes ``lib`` runs on the C core (id ``c``)
and on its pure-Python twin (id ``py``). The twin's classes come from a second copy of
the installed package, loaded as ``aiotb_twin`` the way ``AIOTB_NO_EXTENSIONS=1`` would
load it: the same modules, on the other engine. The C import is eager, so a broken
build is an error, never a skip; ``--no-c-extensions`` deselects the C runs explicitly. A test that takes
``redis_url`` gets an empty database on a redis-server of the session's own (tests/redis_server.py), started
only when a test first asks for it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import uuid
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import aiotb
import pytest
import redis
from redis_server import RedisServer
from virtual_loop import VirtualClockLoop

T = TypeVar("T")
WANT_C = os.environ.get("AIOTB_NO_EXTENSIONS", "") in ("", "0")
if WANT_C:
    from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail the run)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-c-extensions", action="store_true", help="run only the pure-Python core")
    parser.addoption("--only-c-extensions", action="store_true", help="run only the C core")


def _engines(config: pytest.Config) -> list[str]:
    if config.getoption("--no-c-extensions") or not WANT_C:
        return ["py"]
    if config.getoption("--only-c-extensions"):
        return ["c"]
    return ["c", "py"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lib" in metafunc.fixturenames:
        metafunc.parametrize("lib", _engines(metafunc.config), indirect=True)


def twin_package() -> ModuleType:
    """aiotb on the pure-Python engine: the installed package loaded again as ``aiotb_twin`` with
    AIOTB_NO_EXTENSIONS=1 (or aiotb itself, when that is how this run was started)."""
    if aiotb.IMPLEMENTATION == "python":
        return aiotb
    if "aiotb_twin" not in sys.modules:
        folder = Path(aiotb.__file__).parent
        spec = importlib.util.spec_from_file_location("aiotb_twin", folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["aiotb_twin"] = package
        saved = os.environ.get("AIOTB_NO_EXTENSIONS")
        os.environ["AIOTB_NO_EXTENSIONS"] = "1"
        try:
            spec.loader.exec_module(package)
        finally:
            if saved is None:
                del os.environ["AIOTB_NO_EXTENSIONS"]
            else:
                os.environ["AIOTB_NO_EXTENSIONS"] = saved
        assert package.IMPLEMENTATION == "python"
    return sys.modules["aiotb_twin"]


def _namespace(engine: str) -> SimpleNamespace:
    """The public classes on one engine: "c" or "py"."""
    if engine == "c":
        assert aiotb.IMPLEMENTATION == "c", "the C engine is not the active one"
        package = aiotb
    else:
        package = twin_package()
    return SimpleNamespace(package=package, Limiter=package.Limiter, AsyncLimiter=package.AsyncLimiter,
                           KeyedLimiter=package.KeyedLimiter, WindowLimiter=package.WindowLimiter,
                           AdaptiveLimiter=package.AdaptiveLimiter,
                           name=package.IMPLEMENTATION)


_LIBS: dict[str, SimpleNamespace] = {}


@pytest.fixture
def lib(request: pytest.FixtureRequest) -> SimpleNamespace:
    """The public classes on one engine."""
    if request.param not in _LIBS:
        _LIBS[request.param] = _namespace(request.param)
    return _LIBS[request.param]


class LoopErrors(list):  # type: ignore[type-arg]
    """Everything a loop passed to its exception handler: a test fails on any of it."""

    def handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.append(context)


CLIENT_START_US = 1_750_000_000_000_000  # a server's TIME of 2025, in us


class ClientClock:
    """The client's clock the Redis store reads (``time.time_ns``), at whole microseconds the test sets."""

    def __init__(self, us: int = CLIENT_START_US) -> None:
        self.us = us

    def time_ns(self) -> int:
        return self.us * 1000


@pytest.fixture
def client_clock(monkeypatch: pytest.MonkeyPatch) -> ClientClock:
    """The Redis store module's clock, from CLIENT_START_US, the test's to move (a store reads it where
    ``_client_clock`` is set)."""
    from aiotb import _store_redis

    clock = ClientClock()
    monkeypatch.setattr(_store_redis, "time", clock)
    return clock


@pytest.fixture
def store_clock(lib: SimpleNamespace, client_clock: ClientClock, monkeypatch: pytest.MonkeyPatch) -> ClientClock:
    """client_clock as the Redis store of the engine under test reads it (the twin is a package of its own):
    it moves only when the test moves it."""
    monkeypatch.setattr(lib.package._store_redis, "time", client_clock)
    return client_clock


CANCELLED_TASKS_END_WITHIN = 20.0  # s: the tasks a test left running end this long after they are cancelled


def _run_on(loop: asyncio.AbstractEventLoop, main: Awaitable[T]) -> T:
    errors = LoopErrors()
    loop.set_exception_handler(errors.handler)
    left: set[asyncio.Task[Any]] = set()
    try:
        result = loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:  # bounded: a task that outlives its cancellation fails the test instead of hanging it
            _, left = loop.run_until_complete(asyncio.wait(pending, timeout=CANCELLED_TASKS_END_WITHIN))
        # uvloop warns of each transport left open as it closes it, from inside its close: a warning made an
        # error there leaves that transport's handle open, and the close waits for it forever. Recorded, then
        # the test fails on it (a test that failed already reports its own error).
        with warnings.catch_warnings(record=True) as unclosed:
            warnings.simplefilter("always", ResourceWarning)
            loop.close()
    assert not left, (f"{len(left)} task(s) still running {CANCELLED_TASKS_END_WITHIN:g} s after they were "
                      f"cancelled: {sorted(map(repr, left))[:5]}")
    assert not unclosed, f"the loop closed with resources left open: {[str(w.message) for w in unclosed]}"
    assert not errors, f"the event loop reported errors: {errors}"
    return result


@pytest.fixture
def vrun() -> Callable[[Awaitable[T]], T]:
    """Runs a coroutine on a fresh virtual-clock loop (starting at t=0) and returns its result."""
    return lambda main: _run_on(VirtualClockLoop(), main)


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Awaitable[T]], T]]:
    """Runs a coroutine on a fresh real event loop: stock asyncio, then uvloop."""
    yield lambda main: _run_on(_new_loop(request.param), main)


@pytest.fixture
def run_on() -> Callable[[asyncio.AbstractEventLoop, Awaitable[T]], T]:
    """Runs a coroutine on a given fresh loop, closes the loop, and fails on any loop error, like ``vrun``."""
    return _run_on


@pytest.fixture
def name() -> Iterator[str]:
    """A fresh SharedMemoryStore name, removed afterwards (C engine only: the twin has no shared memory)."""
    store_name = f"aiotb-test-{uuid.uuid4().hex[:16]}"
    yield store_name
    aiotb.SharedMemoryStore.unlink(store_name)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of this session on a free port of 127.0.0.1, stopped at the session's end."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The session's redis-server, emptied (FLUSHALL) before the test, as a redis:// URL."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    yield redis_server.url
