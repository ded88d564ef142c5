"""aiotb: an exact, fair, cancellation-safe rate limiter for asyncio, with a C token-bucket engine."""

from ._core import core as _core
from ._keyed import KeyedLimiter
from ._limiter import LimiterStats
from ._limiter import build as _build

Limiter, AsyncLimiter = _build(_core)
KeyedLimiter._limiter_class = Limiter
IMPLEMENTATION: str = _core.IMPLEMENTATION  # "c" or "python": which core is active

__all__ = ["AsyncLimiter", "IMPLEMENTATION", "KeyedLimiter", "Limiter", "LimiterStats"]
__version__ = "0.1.0"
