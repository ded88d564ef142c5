"""The C engine of aiotb (src/_tokenbucket/); the pure-Python twin aiotb._bucket_py has the same interface."""

from asyncio import AbstractEventLoop
from collections.abc import Sequence
from typing import Any, Coroutine, Final, Generator, Self, final, type_check_only

from typing_extensions import disjoint_base

IMPLEMENTATION: Final[str]
MAX_SPAN: Final[int]
READY: Ready

@type_check_only
class Ready:
    """A done awaitable: ``await READY`` returns None at once."""
    def __await__(self) -> Generator[Any, None, None]: ...
    def __next__(self) -> Any: ...
    def send(self, value: object, /) -> Any: ...
    def throw(self, typ: Any, val: Any = ..., tb: Any = ..., /) -> Any: ...
    def close(self) -> None: ...

@type_check_only
class Acquisition(Coroutine[Any, Any, None]):
    """What ``acquire()`` returns: takes the tokens when awaited."""
    def send(self, value: object, /) -> Any: ...
    def throw(self, typ: Any, val: Any = ..., tb: Any = ..., /) -> Any: ...
    def close(self) -> None: ...
    def __await__(self) -> Generator[Any, None, None]: ...

@disjoint_base
class Bucket:
    """The limiter's engine: limits, waiter queue, clock and fast path. Subclasses configure it in
    ``__init__`` and provide the wait as ``_wait(amount, timeout)``, ``_wait_to_hold(amount)`` and
    ``_drop_closed()``."""
    def __new__(cls, *args: Any, **kwargs: Any) -> Self: ...
    @property
    def tokens(self) -> float:
        """Tokens available now."""
    @property
    def waiting(self) -> int:
        """Number of queued waiters."""
    async def __aenter__(self) -> None: ...
    async def __aexit__(self, *exc_info: object) -> None: ...
    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for ``amount`` tokens (0 < amount <= burst). With ``timeout``, raises ``TimeoutError``
        at once, taking nothing, if they cannot be granted within it."""
    def try_acquire(self, amount: float = 1) -> bool:
        """Takes the tokens now if a newcomer may have them, else returns False."""
    def has_capacity(self, amount: float = 1) -> bool:
        """Whether ``acquire(amount)`` would go through now; takes nothing."""
    def _configure(self, rates: tuple[tuple[float, float, float], ...], window: tuple[int, float] | None,
                   fair: bool, smallest_first: bool, /) -> None: ...
    def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object, /) -> int: ...
    def _grant_due(self, at: float | None, owner: object, /) -> tuple[list[Any], list[float], float | None]: ...
    def _next_due(self) -> float | None: ...
    def _running_loop(self) -> AbstractEventLoop | None: ...
    def _withdraw(self, ident: int, /) -> bool: ...
    def _withdraw_first_of(self, owner: object, /) -> Any: ...
    def _refund(self, amount: float, /) -> None: ...
    def _reckon_late(self, amount: float, /) -> None: ...
    def _hold(self, amount: float, /) -> None: ...
    def _end_hold(self, amount: float, /) -> None: ...
    def _reserve(self, amount: float, handle: Any, owner: object, /) -> tuple[int, float]: ...
    def _withdraw_stranded(self) -> tuple[Any, bool] | None: ...
    def _set_rate(self, index: int, ns_per_token: float, burst: float, /) -> None: ...
    def _set_window(self, period_ns: int, limit: float, /) -> None: ...
    def _pause_until(self, when: float, /) -> None: ...
    def _limit_until(self, tokens: float, when: float, slack: float, /) -> bool: ...
    def _grant_until(self, when: float, /) -> None: ...
    def _set_largest(self, amount: float, /) -> None: ...
    def _credit(self, tokens: float, /) -> None: ...
    def _obey(self, kind: int, slack: float, headers: object, in_flight: float, /) -> object: ...
    def _settle_cost(self, taken: float, used: float, held: bool, /) -> None: ...
    def _owed(self, ahead: float, /) -> float: ...
    def _stats(self) -> tuple[int, float, int, float, float, int, int]: ...
    def _as_good_as_new(self) -> bool: ...
    def _share(self, segment: Segment, error: type[Exception], /) -> None: ...
    def _share_busy(self, busy: bool, /) -> None: ...
    def _resuming(self, delta: int, /) -> None: ...

@final
class PreciseTimer:
    """A timerfd on CLOCK_MONOTONIC armed at absolute instants, for ``loop.add_reader`` (Linux only)."""
    def fileno(self) -> int:
        """The descriptor, for loop.add_reader."""
    def arm(self, at: float, /) -> None:
        """Fires at the CLOCK_MONOTONIC time at (seconds), replacing any earlier arming."""
    def disarm(self) -> None:
        """Stops the timer; it is not readable until armed and fired again."""
    def expired(self) -> bool:
        """Whether the instant armed last has come; consumes the news."""
    def close(self) -> None:
        """Closes the descriptor (again: nothing happens)."""
    @property
    def closed(self) -> bool:
        """Whether close() was called."""

# The shared limiter's segment (src/_tokenbucket/shm.h; Linux only). Statuses are the ints below; instants are
# ints of nanoseconds on CLOCK_MONOTONIC.
SHM_OK: Final[int]
SHM_EINVAL: Final[int]
SHM_ETOOLATE: Final[int]
SHM_ENOTREADY: Final[int]
SHM_EMISMATCH: Final[int]
SHM_EFOREIGN: Final[int]
SHM_EAGAIN: Final[int]
SHM_ESTALE: Final[int]
NEVER: Final[int]
SHM_MAX_SPAN: Final[int]
SHM_HORIZON: Final[int]

class SegmentCorrupt(RuntimeError):
    """The shared segment is not aiotb's, or is corrupt."""

@final
class Segment:
    """A shared limiter's segment: the named POSIX shared-memory object ``name``, mapped (created with ``mode``,
    exactly, and sized if there was none). Every instant is an int of nanoseconds on CLOCK_MONOTONIC."""
    def __new__(cls, name: str, mode: int = 0o600) -> Self: ...
    @property
    def created(self) -> bool:
        """Whether this object created the shared-memory object."""
    @property
    def owner(self) -> int:
        """The uid that owned the shared-memory object when it was opened."""
    @property
    def mode(self) -> int:
        """The object's permission bits when it was opened."""
    def create(self, rates: Sequence[tuple[float, float, float]]) -> int:
        """Fills and publishes the segment this object created, with rates ((ns_per_token, burst, initial), 1 to
        4 of them); returns the status (SHM_OK, SHM_EINVAL, SHM_EFOREIGN)."""
    def join(self, rates: Sequence[tuple[float, float, float]]) -> int:
        """Whether the segment is published, intact and created with rates: SHM_OK, SHM_ENOTREADY (ask again),
        SHM_EMISMATCH or SHM_EFOREIGN."""
    def created_rates(self) -> tuple[tuple[float, float, float], ...]:
        """The rates a published segment was created with; ValueError before it is published, SegmentCorrupt
        for a foreign one."""
    def reserve(self, amount: float, now: int, deadline: int) -> tuple[int, int, bytes]:
        """Reserves amount at its first grant instant unless that is after deadline (NEVER: none): (status,
        instant, record for cancel)."""
    def take_now(self, amount: float, now: int) -> int:
        """Takes amount if it can be granted at now; returns the status (SHM_OK, SHM_ETOOLATE: nothing taken)."""
    def cancel(self, record: bytes, now: int) -> int:
        """Cancels the reservation of record at now, giving back each rate no later reservation built on;
        returns how many rates it gave back."""
    def settle(self, taken: float, used: float, now: int) -> int:
        """Settles a grant of taken whose real cost was used: the difference given back or taken as debt;
        returns the status (SHM_EINVAL: nothing changed)."""
    def limit_until(self, tokens: float, until: int, slack: int, now: int) -> int:
        """At most tokens more granted before until, for every process (a limit running is tightened by one
        ending within slack of it, replaced by one ending later, kept by one ending earlier); returns the status."""
    def tokens(self, now: int) -> float:
        """The tokens available at now: the fewest over the rates and a limit, 0 while paused."""
    def fit_at(self, amount: float, now: int) -> int:
        """The first instant >= now at which amount would be granted, taking nothing (NEVER for amount over a
        burst)."""
    def pause_until(self, until: int) -> None:
        """No grant before until, for every process (a later pause only)."""
    def paused_until(self) -> int:
        """The instant before which nothing is granted (-2**63: none)."""
    def set_rate(self, index: int, ns_per_token: float, burst: float, now: int) -> int:
        """Changes rate index for every process as of now, keeping its tokens; returns the status (SHM_EAGAIN:
        overtaken, try again)."""
    def change_rate(self, index: int, from_ns_per_token: float, from_burst: float, ns_per_token: float, burst: float,
                    now: int) -> int:
        """set_rate only while rate index's live parameters are the from ones; returns the status (SHM_ESTALE: they
        are not, nothing changed)."""
    def rate_params(self, index: int) -> tuple[float, float, float]:
        """Rate index's live (ns_per_token, burst, initial)."""
    def check(self) -> int:
        """0 if every invariant of the segment holds, else the number of the broken one."""
    def close(self) -> None:
        """Unmaps the segment (again: nothing happens); the object and its name stay."""
    @staticmethod
    def unlink(name: str) -> bool:
        """Removes the name: True, or False if there was none."""
    @staticmethod
    def now() -> int:
        """CLOCK_MONOTONIC in nanoseconds."""
