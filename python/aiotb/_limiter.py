"""The public limiter, ``Limiter``, an ordinary class on the engine (``AsyncLimiter`` and ``WindowLimiter`` are its
subclasses, in modules of their own).

``Bucket`` (the C core, or its pure-Python twin) holds the limits and the queue and serves the
uncontended path by itself; a request that must wait comes back here through ``_wait`` and goes
to the dispatcher of the running loop. Cold parameters are checked here, once (``_params``)."""

from __future__ import annotations

import asyncio
import functools
import inspect
from asyncio import events
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Coroutine, Generic, Literal, NamedTuple,
                    ParamSpec, Protocol, Self, Sequence, TypeAlias, TypeVar, cast, overload)

from . import _params
from ._clock import loop_now, wall_now
from ._core import Bucket
from ._capabilities import Store, refusal, refused
from ._dispatch import PRECISE_REFILL
from ._owners import Owners
from ._reservation import BaseReservation, Reservation
from ._signals import Headers, QuotaKind, Signals, quota_and_left
from ._store_redis import RedisStore, redacted
from ._store_shm import SharedMemoryStore, _segment_type

if TYPE_CHECKING:
    from typing_extensions import TypeVar as DefaultedTypeVar

    # What a limiter's rates live in: None (this process), a SharedMemoryStore or a RedisStore. A limiter's
    # type carries it, so that the calls a store cannot answer without a round trip are rejected by the type
    # checker over it: over a RedisStore, try_acquire() is an error, await atry_acquire() the call.
    StoreT = DefaultedTypeVar("StoreT", bound="SharedMemoryStore | RedisStore | None", default=None)
else:
    StoreT = TypeVar("StoreT")

P = ParamSpec("P")
R = TypeVar("R")
LIMIT_SLACK = 1.0  # s: limits whose ends are this close speak of one window of the server's (resets are whole s)


# The limiter classes of the stores, by the store's kind and the class asked for: the module of each enters its
# own (serve) when aiotb is imported, so that this module imports none of them.
Flavour = Literal["Limiter", "WindowLimiter", "AsyncLimiter", "AdaptiveLimiter"]
_OVER: dict[tuple[Store, Flavour], type[Limiter[Any]]] = {}


def not_a_store(store: object) -> TypeError:
    """The error of a store= that is none of the stores."""
    given = repr(redacted(store)) if isinstance(store, str) else f"{type(store).__name__} {store!r}"
    return TypeError(f"store must be None (this process), SharedMemoryStore(name) (the processes of one host) or "
                     f"RedisStore(url, key) (every host), got {given}")


def serve(kind: Store, flavour: Flavour, limiter_class: type[Limiter[Any]]) -> None:
    """Makes limiter_class the class of ``Limiter(..., store=...)`` (or of flavour, the class asked for) over a
    store of kind."""
    _OVER[kind, flavour] = limiter_class


class LimiterStats(NamedTuple):
    """What a limiter has done so far (``limiter.stats()``)."""

    granted: int            # grants kept: a grant given back by a task cancelled before it resumed is not one
    granted_tokens: float
    waits: int              # grants that had to wait in the queue first
    wait_time_total: float  # seconds those waited, from queueing to grant, on the loop's clock
    wait_time_max: float
    cancelled: int          # waits cancelled, before or after their grant, or failed by a change of the limits
    timeouts: int           # acquires refused at once by their timeout
    waiting: int            # tasks queued now


class LimitDecorator(Protocol):
    """What ``limiter.limit(amount)`` returns: a decorator of async functions that keeps their signature."""

    def __call__(self, func: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...


class Slot(Generic[StoreT]):
    """``async with limiter.slot(amount) as slot:``: takes ``amount`` tokens on entry; a window holds them
    until the block exits, so a request sent anywhere inside it counts in every window it may
    reach the server in. ``slot.settle(used)`` says what the grant really cost, once known."""

    __slots__ = ("_limiter", "_amount", "_held", "_entered", "_settled")

    def __init__(self, limiter: Limiter[StoreT], amount: float) -> None:
        self._limiter: Limiter[Any] = limiter
        self._amount = amount
        self._held = False
        self._entered = False  # its grant was taken
        self._settled = False

    async def __aenter__(self) -> Self:
        limiter = self._limiter
        await limiter.acquire(self._amount)
        self._entered = True
        if limiter._window:
            limiter._hold(self._amount)
            self._held = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """Whether the slot holds a window's grant now: entered, and neither exited nor released."""
        return self._held

    def release(self) -> None:
        """Ends the hold now, before the block exits (say, once a response is read); once only."""
        if self._held:
            self._held = False
            self._limiter._end_hold(self._amount)

    def settle(self: LocalSlot, used: float) -> None:
        """The grant's real cost, known once its work is done: ``used`` tokens instead of the slot's amount,
        as ``Limiter.settle`` (less: the difference given back; more: taken now as debt). Inside the block or
        after it; once only. A window still holding the grant holds ``used`` instead, and logs it at the exit."""
        self._check_settle()
        self._limiter._settle_grant(self._amount, used, self._held)
        self._settled = True
        self._amount = float(used)  # what its hold, if any, ends with

    async def asettle(self, used: float) -> None:
        """``settle`` over any store: over a RedisStore, for every client of the key (a round trip where one is
        needed)."""
        if self._held:  # a window's grant, held here
            cast("LocalSlot", self).settle(used)
            return
        await self._settle_once(lambda: self._limiter.asettle(self._amount, used), used)

    async def _settle_once(self, settling: Callable[[], Awaitable[object]], used: float) -> None:
        """Awaits settling() as the slot's one settle, to used: refused if the slot was settled (or is being);
        if it fails, nothing was settled, and the slot may be settled again."""
        self._check_settle()
        self._settled = True  # now: a second settle meanwhile is refused
        try:
            await settling()
        except BaseException:
            self._settled = False
            raise
        self._amount = float(used)

    def _check_settle(self) -> None:
        """RuntimeError unless the slot's grant may be settled now: entered, and not settled yet."""
        if not self._entered:
            raise RuntimeError(f"settle() of a slot never entered: {self!r} has taken no grant to settle")
        if self._settled:
            raise RuntimeError(f"{self!r} is settled already: a slot's grant is settled once only")

    def __repr__(self) -> str:
        return f"<Slot of {self._amount!r} on {self._limiter!r}>"


class Limiter(Generic[StoreT], Bucket):
    """Token-bucket rate limiter for asyncio: ``async with Limiter(100, 1): ...``.

    ``max_rate`` tokens per ``time_period`` seconds (default 60), refilled continuously; at most
    ``burst`` (default: max_rate, at least 1) at once; starts with ``initial`` (default: burst).
    ``rates=[(max_rate, time_period[, burst[, initial]]), ...]`` sets several rates that every grant
    must satisfy at once. Fair (default): strict first-come-first-served. ``fair=False``: a newcomer
    takes free tokens ahead of waiters, unless a waiter with a timeout is queued."""

    __slots__ = ("_rates", "_window", "_fair", "_owners", "__weakref__")
    _warn_on_reuse: ClassVar[bool] = False
    _capacity_is_max_rate: ClassVar[bool] = False  # set_rate's default burst: max_rate itself (aiolimiter)
    _smallest_first: ClassVar[bool] = False  # waiters wake smallest first: a timeout is waited out, not projected
    _flavour: ClassVar[Flavour] = "Limiter"  # which public class this is: each public class sets its own

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # the class for kwargs' store= (the type checkers read the store from __init__'s overloads)
        store = kwargs.get("store")
        if store is None:
            return super().__new__(cls)
        if not isinstance(store, (RedisStore, SharedMemoryStore)):
            raise not_a_store(store)
        kind = store.capabilities.kind
        if kind == "SharedMemoryStore":
            _segment_type()  # RuntimeError first, where there is no shared memory or no C engine
        if issubclass(cls, tuple(_OVER.values())):  # a store's limiter, made directly: it checks its store itself
            return super().__new__(cls)
        flavour = cls._flavour
        if flavour != "Limiter" and refusal(flavour, kind):
            raise refused(flavour, kind)
        if "_flavour" not in cls.__dict__:  # a subclass of one of the three
            raise TypeError(f"store= works with {flavour} itself, not {cls.__name__}")
        return cast(Self, Bucket.__new__(_OVER[kind, flavour]))

    @overload
    def __init__(self: Limiter[None], max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: None = None) -> None: ...
    @overload
    def __init__(self: Limiter[SharedMemoryStore], max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: SharedMemoryStore) -> None: ...
    @overload
    def __init__(self: Limiter[RedisStore], max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: RedisStore) -> None: ...
    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None,
                 store: SharedMemoryStore | RedisStore | None = None) -> None:
        if store is not None:  # a subclass that let store= through: its instance has no store behind it
            raise TypeError(f"store= works with Limiter itself, not {type(self).__name__}")
        self._setup(_params.limiter_rates(max_rate, time_period, burst, initial, rates), None,
                    _params.flag("fair", fair), smallest_first=False)

    if TYPE_CHECKING:  # the engine's answers at once, where the rates are in this host's memory
        @property
        def tokens(self: LocalLimiter) -> float:
            """Tokens available now."""
            ...

        def try_acquire(self: LocalLimiter, amount: float = 1) -> bool:
            """Takes the tokens now if a newcomer may have them, else returns False."""
            ...

        def has_capacity(self: LocalLimiter, amount: float = 1) -> bool:
            """Whether ``acquire(amount)`` would go through now; takes nothing."""
            ...

    def _setup(self, rates: list[_params.Rate], window_ns: int | None, fair: bool, smallest_first: bool) -> None:
        """Configures the engine from checked rates (or a window of window_ns over rates[0])."""
        window = None if window_ns is None else (window_ns, rates[0].max_rate)
        self._configure(tuple(r.engine() for r in rates), window, fair, smallest_first)
        self._rates = rates
        self._window = window_ns is not None
        self._fair = fair
        self._owners = Owners(self, self._warn_on_reuse, queued_last=not smallest_first)
        self._owners.holds = self._window
        self._time_precisely()

    def _time_precisely(self) -> None:
        """Whether short waits want the precise timer: for a window, or a bucket that fills from empty
        within PRECISE_REFILL, where a millisecond of lateness would cost tokens."""
        refill_ns = min(r.burst * r.ns_per_token for r in self._rates)
        self._owners.precise = self._window or refill_ns < PRECISE_REFILL * 1e9

    @property
    def rates(self) -> tuple[tuple[float, float, float], ...]:
        """Every rate as (max_rate, time_period, burst)."""
        return tuple((r.max_rate, r.time_period, r.burst) for r in self._rates)

    @property
    def max_rate(self) -> float:
        """Tokens per time_period (of the first rate)."""
        return self._rates[0].max_rate

    @property
    def time_period(self) -> float:
        """The period of max_rate, in seconds."""
        return self._rates[0].time_period

    @property
    def burst(self) -> float:
        """Capacity: the most tokens one grant may take (the smallest burst of all rates)."""
        return min(r.burst for r in self._rates)

    @property
    def rate(self) -> float:
        """Refill rate in tokens per second (of the first rate)."""
        return self._rates[0].max_rate / self._rates[0].time_period

    @property
    def fair(self) -> bool:
        """Whether newcomers queue behind waiters."""
        return self._fair

    def stats(self) -> LimiterStats:
        """Counts of grants, waits, cancellations and timeouts since the limiter was made."""
        return LimiterStats(*self._stats(), self.waiting)

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        """``@limiter``: every call of the decorated async function first takes one token."""
        return self.limit()(func)

    def limit(self, amount: float | Callable[..., float] = 1) -> LimitDecorator:
        """A decorator: every call takes ``amount`` tokens first, or ``amount(*args, **kwargs)``
        when amount is callable (say, the tokens of an LLM prompt); a window holds them until the
        call returns, as ``slot``."""
        if not callable(amount):
            self.acquire(amount).close()  # checks the amount now; takes nothing

        def decorate(func: Callable[P, Awaitable[R]], /) -> Callable[P, Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(func):
                raise TypeError(f"a limiter decorates async functions, got {func!r}")

            @functools.wraps(func)
            async def limited(*args: P.args, **kwargs: P.kwargs) -> R:
                tokens = amount(*args, **kwargs) if callable(amount) else amount
                if not self._window:
                    await self.acquire(tokens)
                    return await func(*args, **kwargs)
                async with self.slot(tokens):
                    return await func(*args, **kwargs)

            return limited

        return decorate

    def slot(self, amount: float = 1) -> Slot[StoreT]:
        """``async with limiter.slot(amount):`` takes ``amount`` tokens on entry, as ``acquire``. A
        window holds them until the block exits: they count in every window from the grant until
        ``time_period`` after the exit, wherever inside the block the request reaches the server.
        A bucket paces grants and gives nothing back."""
        self.acquire(amount).close()  # checks the amount now; takes nothing
        return Slot(self, float(amount))

    def set_rate(self: LocalLimiter, max_rate: float, time_period: float | None = None, *, burst: float | None = None,
                 index: int = 0) -> None:
        """Changes rate ``index`` from now on (``time_period``/``burst`` left out: unchanged).
        It keeps the tokens it holds, at most the new burst; queued waiters are re-timed at
        once, and those that can no longer be granted as promised are failed (see docs/guides/server-signals.md)."""
        i, spec, window_ns = self._changed_rate(max_rate, time_period, burst, index)
        if window_ns is not None:
            self._set_window(window_ns, spec.max_rate)
        else:
            self._set_rate(i, spec.ns_per_token, spec.burst)
        self._rates = [*self._rates[:i], spec, *self._rates[i + 1:]]
        self._time_precisely()
        self._settle()

    def _changed_rate(self, max_rate: float, time_period: float | None, burst: float | None,
                      index: int) -> tuple[int, _params.Rate, int | None]:
        """set_rate's parameters checked: the rate's index, the rate, and a window's period in ns (None
        for a bucket's rate)."""
        i = _params.index(index, len(self._rates))
        old = self._rates[i]
        period = old.time_period if time_period is None else time_period
        if self._window:
            if burst is not None:
                raise TypeError("a window takes no burst: its limit is max_rate")
            spec, ns = _params.window(max_rate, period)
            return i, spec, ns
        if self._capacity_is_max_rate:
            return i, _params.rate("", max_rate, period, burst, burst_below_one=burst is None), None
        return i, _params.rate("", max_rate, period, old.burst if burst is None else burst), None

    def pause_until(self: LocalLimiter, when: float) -> None:
        """Grants nothing before loop time ``when`` (a later call can only move it later)."""
        self._pause_until(_params.loop_time("when", when))
        self._settle()

    def penalize(self: LocalLimiter, seconds: float) -> None:
        """Grants nothing for ``seconds`` from now: a server's ``Retry-After``."""
        span = _params.pause("seconds", seconds)
        self.pause_until(loop_now() + span)

    def limit_until(self: LocalLimiter, tokens: float, when: float) -> None:
        """Grants at most ``tokens`` more before loop time ``when``, on top of the rates: what a server says is
        left of its quota until it resets (``follow`` reads it from a response's headers); 0 grants nothing
        before ``when``. A limit still running is tightened by one that ends within a second of it (news of the
        same window: the fewer tokens, the later end), replaced by one that ends later (the server's next
        window), and kept by one that ends earlier (news of an earlier window, come late), so that responses
        read out of order never loosen it. A grant given back (a cancelled task's) does not come back to it."""
        if self._limit_until(_params.non_negative("tokens", tokens), _params.loop_time("when", when), LIMIT_SLACK):
            self._settle()

    def follow(self: LocalLimiter, headers: Headers, *, quota: QuotaKind = "requests",
               in_flight: float = 0) -> Signals:
        """Obeys what a response's headers say is left of the server's quota: at most that many more grants
        before its reset (``limit_until``), less ``in_flight``, the tokens of the other requests sent and not
        yet answered, which the server may not have counted yet (the HTTP adapters count them). ``quota``: the quota
        this limiter's amounts count, "requests", or "tokens", "input_tokens", "output_tokens" for a limiter
        whose amounts are a language model's tokens. Reads the IETF draft's ``RateLimit`` fields,
        ``X-RateLimit-*``, OpenAI's and Anthropic's (``aiotb._signals``); what it cannot read changes nothing,
        and nothing the headers hold raises. Returns what it read: its ``retry_after`` is the caller's to
        obey (``retry_after``), as a server sends it with a 429 or 503 only.
        ``limiter.follow(response.headers)``."""
        signals, left = quota_and_left(headers, quota, in_flight)
        if left is not None:
            self.limit_until(*left)
        return signals

    def settle(self: LocalLimiter, taken: float, used: float) -> None:
        """The real cost of a grant, known only once its work is done: a grant of ``taken`` tokens (the estimate
        it was acquired with) cost ``used``. Less: the difference is given back now, leaving the rates where a
        grant of ``used`` would have (never fuller than full). More: the difference is taken now, whether or
        not it fits, as debt that delays every later grant: each rate takes it, a window counts it from now,
        and a ``limit_until`` count loses it (never below 0; a refund gives it nothing back). Queued waiters
        are re-timed, and those it strands past their timeout are failed. The limiter keeps no record of its
        grants: settle each once, with the amount it was acquired with. A refund that comes after later grants
        is exact only if none of them found a rate full; it may give back up to the difference more.
        ``async with limiter.slot(estimate) as slot: ...; slot.settle(real)`` settles a slot's."""
        self._settle_grant(taken, used, False)

    def retry_after(self: LocalLimiter, value: str | bytes | float) -> float:
        """Grants nothing until a server's ``Retry-After`` has passed: ``value`` is the header's
        value (delta-seconds, or an HTTP date, which is read against this host's wall clock; a
        past date pauses nothing), or a number of seconds. Returns the seconds paused."""
        span = _params.retry_after(value, wall_now())
        self.penalize(span)
        return span

    # ---- the same calls as coroutines: over every store (over a RedisStore, a round trip) ----

    async def atry_acquire(self, amount: float = 1) -> bool:
        """``try_acquire`` over any store: takes the tokens now if a newcomer may have them, else False."""
        return self._here().try_acquire(amount)

    async def ahas_capacity(self, amount: float = 1) -> bool:
        """``has_capacity`` over any store: whether ``acquire(amount)`` would go through now; takes nothing."""
        return self._here().has_capacity(amount)

    async def read_tokens(self) -> float:
        """``tokens`` over any store: the tokens available now (the fewest over the rates; 0 while paused)."""
        return self._here().tokens

    async def aset_rate(self, max_rate: float, time_period: float | None = None, *, burst: float | None = None,
                        index: int = 0) -> None:
        """``set_rate`` over any store: over a RedisStore, for every client of the key."""
        self._here().set_rate(max_rate, time_period, burst=burst, index=index)

    async def apenalize(self, seconds: float) -> None:
        """``penalize`` over any store: over a RedisStore, for every client of the key, by the server's clock."""
        self._here().penalize(seconds)

    async def apause_until(self, when: float) -> None:
        """``pause_until`` over any store: over a RedisStore, what is left of it from now, by the server's clock."""
        self._here().pause_until(when)

    async def alimit_until(self, tokens: float, when: float) -> None:
        """``limit_until`` over any store: over a RedisStore, for every client of the key, what is left of it from
        now by the server's clock (one round trip)."""
        self._here().limit_until(tokens, when)

    async def afollow(self, headers: Headers, *, quota: QuotaKind = "requests", in_flight: float = 0) -> Signals:
        """``follow`` over any store: over a RedisStore, for every client of the key (one round trip when the
        headers tell of the quota)."""
        signals, left = quota_and_left(headers, quota, in_flight)
        if left is not None:
            await self.alimit_until(*left)
        return signals

    async def asettle(self, taken: float, used: float) -> None:
        """``settle`` over any store: the stores that cannot settle a cost yet refuse it (TypeError)."""
        self._here().settle(taken, used)

    async def areserve(self, amount: float = 1) -> BaseReservation:
        """``reserve`` over any store: over a RedisStore, a place in the order of every client of its key (one
        round trip; ``RedisReservation``)."""
        return self._here().reserve(amount)

    async def aretry_after(self, value: str | bytes | float) -> float:
        """``retry_after`` over any store; returns the seconds paused."""
        return self._here().retry_after(value)

    def _engine_tokens(self) -> float:
        """The tokens the engine in this process holds (the units a lease holder holds, say)."""
        return super(Limiter, self).tokens  # the engine's own, past any override

    def _here(self) -> LocalLimiter:
        """This limiter, whose store answers at once: the store classes that need a round trip override
        every coroutine above."""
        return cast("LocalLimiter", self)

    def acquire_blocking(self, amount: float = 1, timeout: float | None = None) -> None:
        """Blocks the calling thread until ``amount`` tokens are granted, in the same queue as the
        tasks of every loop; TimeoutError at once, taking nothing, if they cannot come within
        ``timeout`` seconds. From a thread whose event loop is running, RuntimeError: use ``await
        limiter.acquire()`` there (blocking would stall the loop)."""
        if events._get_running_loop() is not None:
            raise RuntimeError("acquire_blocking() would block the running event loop; "
                               "use await limiter.acquire() in a coroutine")
        self.acquire(amount, timeout).close()  # checks the amount and the timeout; takes nothing
        if not self._here().try_acquire(amount):
            limit = None if timeout is None else float(timeout)
            if self._smallest_first:
                self._owners.wait_blocking(float(amount), None, give_up_after=limit)
            else:
                self._owners.wait_blocking(float(amount), limit)

    def __enter__(self) -> None:
        """``with limiter:`` in a thread takes one token, blocking until it comes (see acquire_blocking);
        a window holds it until the block exits."""
        if events._get_running_loop() is not None:
            raise RuntimeError("`with limiter:` would block the running event loop; use `async with limiter:`")
        self.acquire_blocking()
        if self._window:
            self._hold(1.0)

    def __exit__(self, *exc_info: object) -> None:
        """A window's token leaves it ``time_period`` from now; a bucket gives nothing back."""
        if self._window:
            self._end_hold(1.0)

    def reserve(self: LocalLimiter, amount: float = 1) -> Reservation:
        """Takes a place in the queue now and says when it will be granted: ``r.delay``
        seconds from now, at loop time ``r.ready_at``. ``await r`` waits for it;
        ``r.cancel()`` gives the place (or the tokens) back."""
        dispatcher = self._owners.dispatcher()
        granted = dispatcher.loop.create_future()
        granted.add_done_callback(dispatcher.not_resuming)  # its holder awaits it when it likes, or never
        ident, ready_at = self._reserve(amount, granted, dispatcher)
        dispatcher.guarded()
        return Reservation(self, ident, float(amount), granted, ready_at, dispatcher)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}) tokens={self._here().tokens:.6g} "
                f"waiting={self.waiting} at {id(self):#x}>")

    # ---- called by the engine ----

    def _wait(self, amount: float, timeout: float | None) -> Coroutine[Any, Any, None]:
        """The wait of a request the engine could not grant at once, on the running loop."""
        return self._owners.dispatcher(self._running_loop()).wait(self, amount, timeout)

    async def _wait_to_hold(self, amount: float) -> None:
        """The wait of ``async with`` on a window: the grant is held until ``__aexit__``."""
        await self._owners.dispatcher().wait(self, amount, None)
        self._hold(amount)

    def _over_capacity(self, amount: object) -> Exception:
        """The error for an amount no single grant can take."""
        return ValueError(f"amount must not exceed burst ({self.burst!r}), got {amount!r}")

    # ---- internals ----

    def _checked_amount(self, value: object) -> float:
        """value as an amount a grant may take, checked as acquire checks it (by the engine, which takes
        nothing here), for the limiters whose grants are decided by a store."""
        Bucket.acquire(self, cast(float, value)).close()
        return float(cast(float, value))

    def _drop_closed(self) -> None:
        """Drops the waiters of closed loops (before the engine moves onto another loop's clock)."""
        self._owners.drop_closed()

    def _settle_amounts(self, taken: object, used: object) -> tuple[float, float]:
        """settle's parameters checked: TypeError/ValueError naming them."""
        x = _params.positive("taken", taken)
        if x > self.burst:
            raise ValueError(f"taken must not exceed burst ({self.burst!r}), the most a grant takes, got {taken!r}")
        return x, _params.non_negative("used", used)

    def _settle_grant(self, taken: object, used: object, held: bool) -> None:
        """settle's parameters checked (TypeError/ValueError naming them, nothing changed), then settled: held, a
        window's grant that its slot still holds."""
        x, y = self._settle_amounts(taken, used)
        self._settle_cost(x, y, held)
        if self.waiting:  # with no one queued, there is no one to re-time or fail
            self._settle()

    def _settle(self) -> None:
        """After a change of the limits: fail the waiters it strands, re-time the rest."""
        owners = self._owners
        owners.fail_stranded()
        loop = events._get_running_loop()
        here = owners.dispatchers.get(loop) if loop is not None else None
        owners.retime(here)
        if here is not None:
            here.guarded()


if TYPE_CHECKING:
    LocalLimiter: TypeAlias = "Limiter[None] | Limiter[SharedMemoryStore]"  # a limiter whose store answers at once
    LocalSlot: TypeAlias = "Slot[None] | Slot[SharedMemoryStore]"  # a slot of one
