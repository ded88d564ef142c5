"""aiotb: an exact, fair, cancellation-safe rate limiter for asyncio, with a C token-bucket engine."""

from ._core import core as _core
from ._keyed import KeyedLimiter
from ._limiter import LimiterStats, Reservation
from ._limiter import build as _build
from ._limiter import window_class as _window_class

Limiter, AsyncLimiter = _build(_core)
WindowLimiter = _window_class(Limiter)
KeyedLimiter._limiter_class = Limiter
IMPLEMENTATION: str = _core.IMPLEMENTATION  # "c" or "python": which core is active

__all__ = ["AsyncLimiter", "IMPLEMENTATION", "KeyedLimiter", "Limiter", "LimiterStats", "Reservation",
           "WindowLimiter"]
__version__ = "0.1.0"
