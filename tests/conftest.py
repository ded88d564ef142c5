"""One suite, two engines: every test that takes ``lib`` runs on the C core (id ``c``)
and on its pure-Python twin (id ``py``). The C import is eager, so a broken build
is an error, never a skip; ``--no-c-extensions`` deselects the C runs explicitly."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import pytest
from aiotb import _core_py
from aiotb._keyed import KeyedLimiter
from aiotb._limiter import build, window_class
from virtual_loop import VirtualClockLoop

T = TypeVar("T")
WANT_C = os.environ.get("AIOTB_NO_EXTENSIONS", "") in ("", "0")
if WANT_C:
    from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail the run)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-c-extensions", action="store_true", help="run only the pure-Python core")


def _engines(config: pytest.Config) -> list[str]:
    if config.getoption("--no-c-extensions") or not WANT_C:
        return ["py"]
    return ["c", "py"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lib" in metafunc.fixturenames:
        metafunc.parametrize("lib", _engines(metafunc.config), indirect=True)


def _namespace(core: Any) -> SimpleNamespace:
    limiter, async_limiter = build(core)
    keyed = type("KeyedLimiter", (KeyedLimiter,), {"_limiter_class": limiter})
    return SimpleNamespace(core=core, Limiter=limiter, AsyncLimiter=async_limiter, KeyedLimiter=keyed,
                           WindowLimiter=window_class(limiter), name=core.IMPLEMENTATION)


_LIBS: dict[str, SimpleNamespace] = {}


@pytest.fixture
def lib(request: pytest.FixtureRequest) -> SimpleNamespace:
    """The public classes on one engine."""
    if request.param not in _LIBS:
        _LIBS[request.param] = _namespace(_tokenbucket if request.param == "c" else _core_py)
    return _LIBS[request.param]


class LoopErrors(list):  # type: ignore[type-arg]
    """Everything a loop passed to its exception handler: a test fails on any of it."""

    def handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.append(context)


def _run_on(loop: asyncio.AbstractEventLoop, main: Awaitable[T]) -> T:
    errors = LoopErrors()
    loop.set_exception_handler(errors.handler)
    try:
        result = loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
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
