"""What every store's failures are: a limiter over a store that cannot answer, or whose answer
cannot be trusted, raises one of these and grants nothing. And what a store that cannot answer may
take from instead: a fallback limiter of this process."""

from __future__ import annotations

from typing import Any, Coroutine, Protocol


class StoreError(RuntimeError):
    """A store cannot serve the limiter: its state is unreachable or cannot be trusted."""


class StoreCorrupt(StoreError):
    """A store's state is not aiotb's, or is corrupt: nothing was granted from it."""


class Fallback(Protocol):
    """What ``RedisStore(..., on_error=...)`` takes from while Redis cannot answer: a limiter whose rates are
    in this process or host (``Limiter(...)``), which answers ``try_acquire`` at once."""

    def try_acquire(self, amount: float = 1) -> bool: ...

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]: ...


class StoreUnavailable(StoreError):
    """A store did not answer (down, restarting, too slow, the connection lost): nothing was granted
    from it. The cause is chained (``__cause__``)."""
