"""One limiter per key (user, host, API key), with memory bounded by the keys in use."""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any, Coroutine, Hashable

SWEEP_PER_ACCESS = 2  # buckets looked at for eviction on each access: eviction keeps pace with creation


class KeyedLimiter:
    """``async with keyed[user_id]: ...`` or ``await keyed.acquire(user_id, amount)``.

    Every key gets its own ``Limiter(max_rate, time_period, **options)``, made on first use.
    A key's limiter is dropped once it is full, nobody waits on it and nothing else holds it:
    it is then the same as a new one, so dropping it changes nothing and memory follows the
    keys in use, not every key ever seen."""

    _limiter_class: Any = None  # set by the package to its Limiter

    def __init__(self, max_rate: float, time_period: float = 60, **options: Any) -> None:
        self._prototype = self._limiter_class(max_rate, time_period, **options)  # checks the options once
        self._args = (max_rate, time_period)
        self._options = options
        self._limiters: OrderedDict[Hashable, Any] = OrderedDict()

    def __getitem__(self, key: Hashable) -> Any:
        limiters = self._limiters
        limiter = limiters.get(key)
        if limiter is None:
            limiter = limiters[key] = self._limiter_class(*self._args, **self._options)
        self._sweep(key)
        return limiter

    def acquire(self, key: Hashable, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Takes amount tokens of key's limiter; see ``Limiter.acquire``."""
        return self[key].acquire(amount, timeout)

    def __contains__(self, key: object) -> bool:
        return key in self._limiters

    def __len__(self) -> int:
        """The number of keys with a limiter in memory."""
        return len(self._limiters)

    def _sweep(self, used: Hashable) -> None:
        """Looks at the least recently seen limiters and drops those that are as good as new."""
        limiters = self._limiters
        for _ in range(min(SWEEP_PER_ACCESS, len(limiters) - 1)):
            key, limiter = next(iter(limiters.items()))
            if key == used:
                break
            # the map, this frame's `limiter`, and getrefcount's argument: no one else holds it
            if limiter.waiting == 0 and sys.getrefcount(limiter) <= 3 and limiter.tokens >= limiter.burst:
                del limiters[key]
            else:
                limiters.move_to_end(key)
        limiters.move_to_end(used)

    def __repr__(self) -> str:
        return f"<KeyedLimiter {self._prototype!r} keys={len(self._limiters)}>"
