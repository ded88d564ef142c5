from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Final,
    Generator,
    Hashable,
    NamedTuple,
    Sequence,
    TypeVar,
)

_R = TypeVar("_R")

IMPLEMENTATION: Final[str]
__version__: Final[str]
__all__ = ["AsyncLimiter", "IMPLEMENTATION", "KeyedLimiter", "Limiter", "LimiterStats", "Reservation",
           "WindowLimiter"]

class LimiterStats(NamedTuple):
    granted: int
    granted_tokens: float
    waits: int
    wait_time_total: float
    wait_time_max: float
    cancelled: int
    timeouts: int
    waiting: int

class Reservation:
    """A place in a limiter's queue: ``await r`` waits for its grant."""
    ready_at: float
    @property
    def delay(self) -> float: ...
    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    def __await__(self) -> Generator[Any, None, None]: ...

class Limiter:
    """Token-bucket rate limiter for asyncio: ``async with Limiter(100, 1): ...``.

    ``max_rate`` tokens per ``time_period`` seconds, refilled continuously; at most
    ``burst`` (default: max_rate, at least 1) at once; starts with ``initial`` (default: burst).
    Fair (default): strict first-come-first-served. ``fair=False``: a newcomer takes free
    tokens ahead of waiters, unless a waiter with a timeout is queued."""

    def __new__(cls, max_rate: float | None = None, time_period: float | None = 60, *,
                burst: float | None = None, initial: float | None = None, fair: bool = True,
                rates: Sequence[tuple[float, ...]] | None = None) -> Limiter: ...
    @property
    def rates(self) -> tuple[tuple[float, float, float], ...]: ...
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
    def reserve(self, amount: float = 1) -> Reservation: ...
    def set_rate(self, max_rate: float, time_period: float | None = None, *, burst: float | None = None,
                 index: int = 0) -> None: ...
    def pause_until(self, when: float) -> None: ...
    def penalize(self, seconds: float) -> None: ...
    def stats(self) -> LimiterStats: ...
    def __call__(self, func: Callable[..., Awaitable[_R]]) -> Callable[..., Awaitable[_R]]: ...
    def limit(self, amount: float | Callable[..., float] = 1
              ) -> Callable[[Callable[..., Awaitable[_R]]], Callable[..., Awaitable[_R]]]: ...

class AsyncLimiter(Limiter):
    """Drop-in for ``aiolimiter.AsyncLimiter``: capacity max_rate, newcomers take free
    capacity first, waiters woken smallest amount first."""

    max_rate: float
    time_period: float
    def __new__(cls, max_rate: float, time_period: float = 60) -> AsyncLimiter: ...  # type: ignore[misc]
    def acquire(self, amount: float = 1) -> Coroutine[Any, Any, None]: ...  # type: ignore[override]

class WindowLimiter(Limiter):
    """At most ``max_rate`` tokens in any window of ``time_period`` seconds, bursts included."""
    def __new__(cls, max_rate: float, time_period: float | None = 60, *, fair: bool = True  # type: ignore[override]
                ) -> WindowLimiter: ...

class KeyedLimiter:
    """One ``Limiter(max_rate, time_period, **options)`` per key, dropped once as good as new."""
    def __init__(self, max_rate: float, time_period: float = 60, **options: Any) -> None: ...
    def __getitem__(self, key: Hashable) -> Limiter: ...
    def acquire(self, key: Hashable, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]: ...
    def __contains__(self, key: object) -> bool: ...
    def __len__(self) -> int: ...
