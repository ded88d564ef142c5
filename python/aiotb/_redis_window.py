"""The engine of a ``WindowLimiter`` over a ``RedisStore``: the Redis limiter's queue and round trips,
over the window's script instead of the bucket's."""

from __future__ import annotations

from . import _params
from ._limiter import serve
from ._window_limiter import WindowLimiter
from ._redis_limiter import RedisLimiter, check_refill
from ._store_redis import RedisStore


class RedisWindowLimiter(RedisLimiter, WindowLimiter[RedisStore]):
    """``WindowLimiter(..., store=RedisStore(redis, key))``: at most ``max_rate`` tokens in any
    window of ``time_period`` seconds, over every client of the key, exact on the server's instants.
    A grant taken by ``async with``, ``slot`` or a decorator is held until its block exits (see
    ``WindowLimiter``); a bare ``acquire`` counts from its grant."""

    __slots__ = ()

    def __init__(self, max_rate: float, time_period: float = 60, *, fair: bool = True,
                 store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore):
            raise TypeError(f"store must be a RedisStore, got {store!r}")
        spec, period_ns = _params.window(max_rate, time_period)
        check_refill(1, period_ns)
        self._setup([spec], period_ns, _params.flag("fair", fair), smallest_first=False)
        self._over(store, store.bind_window(period_ns, spec.max_rate))


serve("RedisStore", "WindowLimiter", RedisWindowLimiter)
