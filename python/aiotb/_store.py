"""What a store is, as the limiters over it see it: one interface (``Store``, and ``StoreRates`` for its rates,
bound once), what every store's failures are, and what a store that cannot answer may take from instead.

A store keeps a limiter's rates where several limiters share them: ``SharedMemoryStore`` (the processes of
one host) and ``RedisStore`` (every host). ``store.bind(rates)`` gives the rates' state in the store, created
there or joined; every call a limiter makes of it goes through that. Each call is a coroutine: a store of this
host completes it at once (``at_once`` runs it so, and a limiter over it keeps its calls synchronous), Redis
after a round trip. A store never imports a limiter."""

from __future__ import annotations

from typing import Any, Coroutine, NamedTuple, Protocol, Sequence, TypeVar, cast

from ._capabilities import Capabilities

T = TypeVar("T")


class StoreError(RuntimeError):
    """A store cannot serve the limiter: its state is unreachable or cannot be trusted."""


class StoreCorrupt(StoreError):
    """A store's state is not aiotb's, or is corrupt: nothing was granted from it."""


class StoreUnavailable(StoreError):
    """A store did not answer (down, restarting, too slow, the connection lost): nothing was granted
    from it. The cause is chained (``__cause__``)."""


class Fallback(Protocol):
    """What ``RedisStore(..., on_error=...)`` takes from while Redis cannot answer: a limiter whose rates are
    in this process or host (``Limiter(...)``), which answers ``try_acquire`` at once."""

    def try_acquire(self, amount: float = 1) -> bool: ...

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]: ...


class Reserved(NamedTuple):
    """A reservation a store made: its grant ``delay`` ns after the store's now, what a cancel (or the end of a
    window's hold) needs to give it back, and its instant in ns on the store's clock."""

    delay: int
    record: bytes
    at: int


class StoreRates(Protocol):
    """A limiter's rates in a store, bound once (``store.bind(rates)``): every call a limiter over the store makes
    of them. Spans are ns on the store's clock. A store of this host answers each call at once."""

    async def reserve(self, amount: float, wait_ns: int, hold: bool = False,
                      within: float | None = None) -> Reserved | int | None:
        """Reserves amount at the first instant every rate grants it, if that is at most wait_ns from the store's
        now (-1: whenever): its Reserved; None if it is later; where it fits only once a window's held grants
        end, the ns after which to ask again. A window's grant is held (until ``end_hold``) if hold.
        ValueError above what one grant may take; TimeoutError if the answer did not come within ``within``
        s (a store that answers at once always answers within it)."""
        ...

    async def cancel(self, record: bytes) -> int:
        """Gives a reservation back to each rate nobody reserved from since (the CancelAt rule); how many rates
        took it back."""
        ...

    async def fit_delay(self, amount: float, within: float | None = None) -> int:
        """ns from the store's now until every rate could grant amount, taking nothing; ValueError above what
        one grant may take."""
        ...

    async def tokens(self) -> float:
        """The tokens available now: the fewest over the rates, 0 while paused."""
        ...

    async def pause(self, span_ns: int) -> int:
        """No grant for span_ns from the store's now (a later pause only moves it later); ns until its end."""
        ...

    async def limit(self, tokens: float, span_ns: int, slack_ns: int) -> None:
        """At most tokens more granted, to every limiter over the store, in the span_ns from the store's now: a
        server's quota (``Limiter.limit_until`` says how it tightens, replaces or keeps a limit running, by
        slack_ns)."""
        ...

    async def set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        """Changes rate index (from 0) for every limiter over the store, keeping the tokens held now, at most
        the new burst."""
        ...

    async def end_hold(self, record: bytes) -> None:
        """Ends the hold of a window's grant now (rates without a window hold none: nothing to do)."""
        ...


class Store(Protocol):
    """Where a limiter's rates live, shared: what it serves, its rates bound once, its store per key."""

    @property
    def capabilities(self) -> Capabilities:
        """What it serves, and how it answers."""
        ...

    def bind(self, rates: Sequence[tuple[float, float, float]]) -> StoreRates:
        """The state of rates (each ns per token, burst, initial tokens) in the store: created with them, or
        joined, where every limiter must give the same rates (ValueError otherwise)."""
        ...

    def for_key(self, key: str | int) -> Store:
        """The store of one key of a ``KeyedLimiter``; TypeError where it keeps no store per key."""
        ...


def at_once(call: Coroutine[Any, Any, T]) -> T:
    """What a call of a store that answers at once returns (or raises): the call run to its end here, with no
    event loop. RuntimeError if it would wait."""
    try:
        call.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    call.close()
    raise RuntimeError("a store call that answers at once waited")
