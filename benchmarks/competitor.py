"""What every competitor file provides, so each scenario is written once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

SCENARIOS = frozenset({"uncontended", "contended", "smooth", "mixed", "churn", "classic"})  # a limiter's default


@dataclass(frozen=True)
class Competitor:
    """One rate limiter (or reference) as the scenarios drive it.

    ``make(rate, burst)`` builds a limiter for ``rate`` grants per second that
    lets ``burst`` tokens go at once (``None``: the library's own default for
    that rate). Scenarios use ``async with limiter:`` when ``context_manager``
    is true, else ``await acquire(limiter)()``; ``acquire_amount(limiter)(n)``
    takes ``n`` tokens and is ``None`` when the library cannot weigh requests.
    ``environment`` is set in the environment of the child process that runs it,
    before anything is imported there; such a competitor runs alone in its child.
    """

    key: str
    label: str
    make: Callable[[float, float | None], Any]
    acquire: Callable[[Any], Callable[[], Awaitable[Any]]] | None
    context_manager: bool = True
    acquire_amount: Callable[[Any], Callable[[int], Awaitable[Any]]] | None = None
    mapping: str = ""  # how `rate` and `burst` become this library's parameters
    reference: bool = False  # not a limiter: a floor or a baseline
    empty_body: bool = False  # the uncontended loop runs `pass` instead of touching the limiter
    scenarios: frozenset[str] = SCENARIOS
    environment: Mapping[str, str] = field(default_factory=dict)


def version_of(distribution: str) -> str:
    """The installed version of a PyPI distribution, or '?'."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"
