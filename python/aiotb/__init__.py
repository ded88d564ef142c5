"""aiotb: an exact, fair, cancellation-safe rate limiter for asyncio, with a C token-bucket engine."""

from ._adaptive import AdaptiveLimiter
from ._async_limiter import AsyncLimiter
from ._core import IMPLEMENTATION
from ._keyed import KeyedLimiter
from ._lease_limiter import RedisLeaseLimiter
from ._limiter import LimitDecorator, Limiter, LimiterStats, Slot
from ._redis_limiter import RedisLimiter
from ._reservation import BaseReservation, RedisReservation, Reservation
from ._signals import Quota, Signals
from ._store import StoreCorrupt, StoreError, StoreUnavailable
from ._store_redis import RedisStore
from ._store_shm import SharedMemoryStore, _segment_type
from ._window_limiter import WindowLimiter
from . import _redis_adaptive, _redis_window  # noqa: F401  (the limiters over a RedisStore's rule and window enter
                                              # themselves)

try:
    _segment_type()
except RuntimeError:  # no C engine, or no shared memory: Limiter(..., store=SharedMemoryStore(...)) says which
    pass
else:
    from . import _shared, _shm_adaptive  # noqa: F401  (the limiters over a SharedMemoryStore enter themselves)

__all__ = ["AdaptiveLimiter", "AsyncLimiter", "BaseReservation", "IMPLEMENTATION", "KeyedLimiter", "LimitDecorator", "Limiter", "LimiterStats",
           "Quota", "RedisLeaseLimiter", "RedisLimiter", "RedisReservation", "RedisStore", "Reservation", "SharedMemoryStore", "Signals", "Slot", "StoreCorrupt",
           "StoreError", "StoreUnavailable", "WindowLimiter"]
__version__ = "0.1.0"
