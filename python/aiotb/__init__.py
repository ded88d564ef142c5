"""aiotb: an exact, fair, cancellation-safe rate limiter for asyncio, with a C token-bucket engine."""

from ._core import core as _core
from ._limiter import build as _build

Limiter, AsyncLimiter = _build(_core)
IMPLEMENTATION: str = _core.IMPLEMENTATION  # "c" or "python": which core is active

__all__ = ["AsyncLimiter", "IMPLEMENTATION", "Limiter"]
__version__ = "0.1.0"
