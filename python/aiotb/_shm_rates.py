"""A ``SharedMemoryStore``'s rates, bound (``store.bind``): the segment's operations as the store interface has
them (``_store.StoreRates``), each answered at once, on CLOCK_MONOTONIC in ns; a corrupt segment as
``StoreCorrupt``. Imported only where the C engine has shared memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ._store import Reserved, StoreCorrupt
from ._tokenbucket import NEVER, SHM_EAGAIN, SHM_EINVAL, SHM_ESTALE, SHM_ETOOLATE, SHM_OK, Segment, SegmentCorrupt

if TYPE_CHECKING:
    from ._store_shm import SharedMemoryStore

T = TypeVar("T")
SET_RATE_TRIES = 1000  # set_rate overtaken by another process's set_rate of the same rate this often: give up


class SharedRates:
    """A limiter's rates in a shared segment: every process that binds the same store and rates shares them."""

    __slots__ = ("_store", "_segment")

    def __init__(self, store: SharedMemoryStore, segment: Segment) -> None:
        self._store = store
        self._segment = segment

    @property
    def store(self) -> SharedMemoryStore:
        """The store they are in."""
        return self._store

    @property
    def segment(self) -> Segment:
        """The mapped segment, which the engine's fast path takes from too."""
        return self._segment

    def now(self) -> int:
        """Now on the segment's clock (CLOCK_MONOTONIC), ns."""
        return self._segment.now()

    def paused_until(self) -> int:
        """The instant before which nothing is granted, ns (-2**63: none)."""
        return self._call(self._segment.paused_until)

    async def reserve(self, amount: float, wait_ns: int, hold: bool = False,
                      within: float | None = None) -> Reserved | int | None:
        """As ``StoreRates.reserve``; a segment holds no window, so nothing is held."""
        segment = self._segment
        now = segment.now()
        deadline = NEVER if wait_ns < 0 or wait_ns >= NEVER - now else now + wait_ns
        status, instant, record = self._call(segment.reserve, amount, now, deadline)
        if status == SHM_OK:
            return Reserved(max(0, instant - now), record, instant)
        if status == SHM_ETOOLATE:
            return None
        if status == SHM_EINVAL:
            raise ValueError(f"amount must not exceed what one grant of {self._store!r} may take (a burst another "
                             f"process may have set), got {amount!r}")
        raise self._corrupt()

    async def cancel(self, record: bytes) -> int:
        """As ``StoreRates.cancel``."""
        return self._call(self._segment.cancel, record, self._segment.now())

    async def fit_delay(self, amount: float, within: float | None = None) -> int:
        """As ``StoreRates.fit_delay``."""
        segment = self._segment
        now = segment.now()
        at = self._call(segment.fit_at, amount, now)
        if at == NEVER and self.paused_until() != NEVER:
            raise ValueError(f"amount must not exceed what one grant of {self._store!r} may take (a burst another "
                             f"process may have set), got {amount!r}")
        return max(0, at - now)

    async def tokens(self) -> float:
        """As ``StoreRates.tokens``."""
        return self._call(self._segment.tokens, self._segment.now())

    async def settle(self, taken: float, used: float) -> None:
        """A grant of taken cost used, for every process: the difference given back to each rate (never fuller
        than full) or taken now as debt. ValueError, nothing changed, if a debt would reach 2**56 ns (2.28 years)
        ahead or taken is above a burst another process set."""
        status = self._call(self._segment.settle, taken, used, self._segment.now())
        if status == SHM_EINVAL:
            raise ValueError(f"used must leave each rate's debt within 2**56 ns (2.28 years) and taken be at most "
                             f"every burst, got taken={taken!r}, used={used!r}")
        if status != SHM_OK:
            raise self._corrupt()

    async def limit(self, tokens: float, span_ns: int, slack_ns: int) -> None:
        """As ``StoreRates.limit``; ValueError, nothing changed, for a span past 2**56 ns (2.28 years)."""
        segment = self._segment
        now = segment.now()
        status = self._call(segment.limit_until, tokens, now + span_ns, slack_ns, now)
        if status == SHM_EINVAL:
            raise ValueError(f"a limit of {self._store!r} must end within 2**56 ns (2.28 years), got {span_ns!r} ns")
        if status != SHM_OK:
            raise self._corrupt()

    async def pause(self, span_ns: int) -> int:
        """As ``StoreRates.pause``."""
        segment = self._segment
        now = segment.now()
        self._call(segment.pause_until, NEVER if span_ns >= NEVER - now else now + span_ns)
        return max(0, self.paused_until() - now)

    async def set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        """As ``StoreRates.set_rate``; RuntimeError, nothing changed, if other processes' changes of the same rate
        overtook it SET_RATE_TRIES times."""
        segment = self._segment
        for _ in range(SET_RATE_TRIES):
            status = segment.set_rate(index, ns_per_token, burst, segment.now())
            if status == SHM_OK:
                return
            if status != SHM_EAGAIN:
                raise StoreCorrupt(f"{self._store!r} is corrupt: the rate was not changed")
        raise RuntimeError(f"set_rate on {self._store!r} was overtaken by other processes' changes of the same "
                           f"rate {SET_RATE_TRIES} times: nothing was changed")

    def live_rate(self, index: int) -> tuple[float, float]:
        """Rate index's (ns per token, burst), as every process has it now."""
        ns_per_token, burst, _ = self._call(self._segment.rate_params, index)
        return ns_per_token, burst

    def change_rate(self, index: int, was: tuple[float, float], ns_per_token: float, burst: float) -> bool:
        """Changes rate index as set_rate does, only while it is still was (ns per token, burst): a read, modify
        and write of the rate that no other process's change comes between. Whether it changed it (False:
        another process changed it first, and nothing was changed here)."""
        segment = self._segment
        for _ in range(SET_RATE_TRIES):
            status = self._call(segment.change_rate, index, *was, ns_per_token, burst, segment.now())
            if status in (SHM_OK, SHM_ESTALE):
                return status == SHM_OK
            if status != SHM_EAGAIN:
                raise StoreCorrupt(f"{self._store!r} is corrupt: the rate was not changed")
        return False  # overtaken this often: others change it

    async def end_hold(self, record: bytes) -> None:
        """As ``StoreRates.end_hold``: a segment holds no window's grants."""

    def _call(self, method: Callable[..., T], *args: Any) -> T:
        """method(*args) on the segment; its corruption as StoreCorrupt."""
        try:
            return method(*args)
        except SegmentCorrupt as error:
            raise self._corrupt() from error

    def _corrupt(self) -> StoreCorrupt:
        """The error of a segment found corrupt."""
        return StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it")
