"""``WindowLimiter``: a ``Limiter`` that keeps at most ``max_rate`` tokens in any window of ``time_period``."""

from __future__ import annotations

from typing import ClassVar, overload

from . import _params
from ._limiter import Flavour, Limiter, StoreT
from ._store_redis import RedisStore


class WindowLimiter(Limiter[StoreT]):
    """At most ``max_rate`` tokens in any window of ``time_period`` seconds (default 60), bursts included."""

    __slots__ = ()
    _flavour: ClassVar[Flavour] = "WindowLimiter"

    @overload
    def __init__(self: WindowLimiter[None], max_rate: float, time_period: float = 60, *, fair: bool = True,
                 store: None = None) -> None: ...
    @overload
    def __init__(self: WindowLimiter[RedisStore], max_rate: float, time_period: float = 60, *, fair: bool = True,
                 store: RedisStore) -> None: ...
    def __init__(self, max_rate: float, time_period: float = 60, *, fair: bool = True,
                 store: RedisStore | None = None) -> None:
        if store is not None:  # a subclass that let store= through: its instance has no store behind it
            raise TypeError(f"store= works with WindowLimiter itself, not {type(self).__name__}")
        spec, period_ns = _params.window(max_rate, time_period)
        self._setup([spec], period_ns, _params.flag("fair", fair), smallest_first=False)
