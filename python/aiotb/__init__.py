"""aiotb: an exact, fair, cancellation-safe rate limiter for asyncio, with a C token-bucket engine."""

from ._core import IMPLEMENTATION
from ._keyed import KeyedLimiter
from ._limiter import AsyncLimiter, LimitDecorator, Limiter, LimiterStats, Reservation, Slot, WindowLimiter
from ._store_shm import SharedMemoryStore, StoreCorrupt, StoreError

__all__ = ["AsyncLimiter", "IMPLEMENTATION", "KeyedLimiter", "LimitDecorator", "Limiter", "LimiterStats",
           "Reservation", "SharedMemoryStore", "Slot", "StoreCorrupt", "StoreError", "WindowLimiter"]
__version__ = "0.1.0"
