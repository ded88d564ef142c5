from types import TracebackType
from typing import Any, Coroutine, Final

IMPLEMENTATION: Final[str]
__version__: Final[str]
__all__ = ["AsyncLimiter", "IMPLEMENTATION", "Limiter"]

class Limiter:
    """Token-bucket rate limiter for asyncio: ``async with Limiter(100, 1): ...``.

    ``max_rate`` tokens per ``time_period`` seconds, refilled continuously; at most
    ``burst`` (default: max_rate, at least 1) at once; starts with ``initial`` (default: burst).
    Fair (default): strict first-come-first-served. ``fair=False``: a newcomer takes free
    tokens ahead of waiters, unless a waiter with a timeout is queued."""

    def __new__(cls, max_rate: float, time_period: float = 60, *, burst: float | None = None,
                initial: float | None = None, fair: bool = True) -> Limiter: ...
    @property
    def max_rate(self) -> float: ...
    @property
    def time_period(self) -> float: ...
    @property
    def burst(self) -> float: ...
    @property
    def rate(self) -> float:
        """Tokens per second."""
    @property
    def fair(self) -> bool: ...
    @property
    def tokens(self) -> float:
        """Tokens available now."""
    @property
    def waiting(self) -> int:
        """Number of queued waiters."""
    async def __aenter__(self) -> None: ...
    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None: ...
    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for ``amount`` tokens (0 < amount <= burst). With ``timeout``, raises
        ``TimeoutError`` at once, taking nothing, if they cannot be granted within it."""
    def try_acquire(self, amount: float = 1) -> bool:
        """Takes the tokens now if a newcomer may have them, else returns False."""
    def has_capacity(self, amount: float = 1) -> bool:
        """Whether ``acquire(amount)`` would go through now; takes nothing."""

class AsyncLimiter(Limiter):
    """Drop-in for ``aiolimiter.AsyncLimiter``: capacity max_rate, newcomers take free
    capacity first, waiters woken smallest amount first."""

    max_rate: float
    time_period: float
    def __new__(cls, max_rate: float, time_period: float = 60) -> AsyncLimiter: ...  # type: ignore[misc]
    def acquire(self, amount: float = 1) -> Coroutine[Any, Any, None]: ...  # type: ignore[override]
