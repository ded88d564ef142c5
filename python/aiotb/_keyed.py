"""One limiter per key (user, host, API key), with memory bounded by the keys in use."""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from typing import Any, Coroutine, Generic, Hashable, overload

from ._capabilities import refused
from ._limiter import Limiter, StoreT, not_a_store
from ._store_redis import RedisStore
from ._store_shm import SharedMemoryStore

SWEEP_PER_ACCESS = 2  # limiters looked at on each access: eviction keeps pace with creation


class KeyedLimiter(Generic[StoreT]):
    """``async with keyed[user_id]: ...`` or ``await keyed.acquire(user_id, amount)``.

    Every key gets its own ``Limiter(max_rate, time_period, **options)``, made on first use; with
    ``store=RedisStore(redis, name)``, over the hash of ``name:key`` (keys are str or int), which
    expires in Redis once its bucket is full again.
    A key's limiter that is as good as new (full, nobody waiting) is held only weakly from then
    on: while someone still holds it, the same limiter serves the key; once nobody does, it is
    gone, and a new one (the same as it) is made on the next use. Memory follows the keys in use,
    not every key ever seen."""

    limiter_class: type[Limiter[Any]] = Limiter

    @overload
    def __init__(self: KeyedLimiter[None], max_rate: float, time_period: float = 60, *, store: None = None,
                 **options: Any) -> None: ...
    @overload
    def __init__(self: KeyedLimiter[RedisStore], max_rate: float, time_period: float = 60, *, store: RedisStore,
                 **options: Any) -> None: ...
    def __init__(self, max_rate: float, time_period: float = 60, *, store: RedisStore | None = None,
                 **options: Any) -> None:
        if store is not None:
            if not isinstance(store, (RedisStore, SharedMemoryStore)):
                raise not_a_store(store)
            if not store.capabilities.keys:
                raise refused("KeyedLimiter", store.capabilities.kind)
            options["store"] = store
        self._store = store
        self._prototype = self.limiter_class(max_rate, time_period, **options)  # checks the options once
        self._args = (max_rate, time_period)
        self._options = options
        self._limiters: OrderedDict[Hashable, Limiter[StoreT] | weakref.ref[Limiter[StoreT]]] = OrderedDict()
        # threads share the keys: one of them at a time looks up, makes or sweeps (reentrant, for a
        # weak reference's callback run by a collection in the middle of it)
        self._lock = threading.RLock()

    def __getitem__(self, key: Hashable) -> Limiter[StoreT]:
        with self._lock:
            limiters = self._limiters
            held = limiters.get(key)
            limiter: Limiter[StoreT] | None = held() if isinstance(held, weakref.ref) else held
            if limiter is None:
                options = self._options if self._store is None else {**self._options,
                                                                     "store": self._store.for_key(key)}
                limiter = self.limiter_class(*self._args, **options)
            limiters[key] = limiter  # held strongly again while in use
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
        """Looks at the least recently used keys: one whose limiter is as good as new is held weakly,
        and its entry goes with the limiter."""
        limiters = self._limiters
        for _ in range(min(SWEEP_PER_ACCESS, len(limiters) - 1)):
            key, held = next(iter(limiters.items()))
            if key == used:
                break
            if not isinstance(held, weakref.ref) and held._as_good_as_new():
                limiters[key] = weakref.ref(held, functools.partial(_forget, self._lock, limiters, key))
            limiters.move_to_end(key)
        limiters.move_to_end(used)

    def __repr__(self) -> str:
        return f"<KeyedLimiter {self._prototype!r} keys={len(self)}>"


def _forget(lock: threading.RLock, limiters: OrderedDict[Hashable, Limiter[Any] | weakref.ref[Limiter[Any]]],
            key: Hashable, ref: weakref.ref[Limiter[Any]]) -> None:
    """A weakly held limiter is gone: its key's entry goes too (unless the key got a new one)."""
    with lock:
        if limiters.get(key) is ref:
            del limiters[key]
