"""``RedisStore``: a limiter's limits in Redis, shared by every process on every host that reaches
the server: rates in one hash, a window in a hash and a sorted set beside it. Each decision is one
round trip: a Lua script (``_redis_gcra.lua`` or ``_redis_window.lua``, each after ``_redis_clock.lua``
and ``_redis_common.lua``, the first after ``_redis_gcra_reserve.lua`` as well, its common case; sent by
EVALSHA and loaded again after ``NOSCRIPT``) that reads the server's
clock, decides and records. The store sends EVALSHA itself, with two arguments: the client pays
on every call for redis-py's ``Script`` object and for each argument it sends. This module knows
where the state lives and nothing of event loops; ``_redis_limiter`` waits."""

from __future__ import annotations

import hashlib
import time
from importlib import resources
from typing import TYPE_CHECKING, Literal, NamedTuple, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit

from . import _params
from ._capabilities import Capabilities, capabilities, refused
from ._deadline import Deadline
from ._store import Fallback, Reserved, StoreCorrupt, StoreUnavailable

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

OnError = Literal["raise", "allow"]
Errors = tuple[type[BaseException], ...]


def _error_classes() -> tuple[Errors, Errors, Errors, Errors]:
    """redis-py's classes of: a script the server does not hold; a server that cannot answer now (unreachable,
    too slow, loading its data, a replica after a failover, a cluster resharding or without a master, out of
    memory); an answer it refused; any other error of the client. Empty without redis-py: RedisStore()
    then says what to install."""
    try:
        from redis import exceptions as e
    except ImportError:
        return (), (), (), ()
    unavailable = (e.ConnectionError, e.TimeoutError, e.BusyLoadingError, e.ReadOnlyError, e.TryAgainError,
                   e.ClusterDownError, e.ClusterError, e.RedisClusterException, e.OutOfMemoryError)
    return (e.NoScriptError,), unavailable, (e.ResponseError,), (e.RedisError,)


_NO_SCRIPT, _UNAVAILABLE, _REFUSED, _CLIENT_ERRORS = _error_classes()
_LOST: Errors = (*_CLIENT_ERRORS, OSError, RuntimeError)  # any other error of the client, a connection lost or
                                                          # refused (uvloop raises RuntimeError on a write to a
                                                          # transport the peer reset: MagicStack/uvloop#506)
_BUSY = "BUSY "  # a script running past its limit: the one code redis-py leaves unclassified, in the message
TIMEOUT = 2.0  # s: the most a round trip may take where the caller gives no deadline
_STATUSES = (b"0", b"1", b"3", b"4", b"5")  # the scripts': ok, above what a grant may take, not within the wait,
                                            # not before held grants end, another definition
MAX_REFILL_NS = 1 << 52  # the longest full refill the script keeps exact (52 days)
MAX_PAUSE_NS = 1 << 51   # the longest pause it keeps exact (26 days)


class Script(NamedTuple):
    """A script as the server caches it: its text, and the SHA1 that EVALSHA names it by."""

    text: str
    sha: str

    @classmethod
    def of(cls, text: str) -> Script:
        return cls(text, hashlib.sha1(text.encode("utf-8")).hexdigest())


def _scripts(*clock: str) -> dict[str, Script]:
    """The gcra, window and lease scripts, each the Lua files of its parts: the clock, the common case of the gcra
    script's reserve (gcra only), what the scripts share, then its own."""
    def text(part: str) -> str:
        return resources.files("aiotb").joinpath(f"_redis_{part}.lua").read_text(encoding="utf-8")

    return {name: Script.of("".join(text(part) for part in (*clock, *hot, "common", name)))
            for name, hot in (("gcra", ("gcra_reserve",)), ("window", ()), ("lease", ()))}


_SCRIPTS = _scripts("clock")  # on the server's clock
_CLIENT_CLOCK_SCRIPTS = _scripts("clock", "client_clock")  # tests': never loaded by a store made as documented
LEASE_SPANS = (0.05, 3600.0)  # s: the shortest and the longest lease
MOST_UNITS = 1024  # the most units a lease may split the rates into


class Lease(NamedTuple):
    """The lease script's answer: the units the holder holds now, its fair share of them (the most it
    may keep), whether it held no lease before the call, the tokens of the units it took, and the ns
    until a pause ends."""

    units: int
    share: int
    fresh: bool
    tokens: float
    pause_ns: int


class AdaptRule(NamedTuple):
    """AdaptiveLimiter's rule as the script applies it: rates per period_ns, min_rate, max_rate, the factor of a
    cut and the least step of a growth; and the client's name among the key's (hexadecimal digits)."""

    least: float
    most: float
    decrease: float
    increase: float
    period_ns: float
    client: str


class Adapted(NamedTuple):
    """The script's answer to a cut or a growth: whether it made one, the first rate's ns per token now, and the
    µs since the last cut of any client (None if none is known)."""

    acted: bool
    ns_per_token: float
    since_cut_us: int | None


class RedisStore:
    """``Limiter(100, 1, store=RedisStore(redis, "partner-api"))``: one quota for every client of
    that Redis key that builds its limiter with the same rates.

    ``redis`` is a ``redis.asyncio.Redis`` or ``RedisCluster`` client (redis-py 5 or later) or a
    ``redis://`` URL;
    ``key`` names the quota (the hash lives at ``aiotb:{key}``: one hash slot on a cluster). Time
    is the server's, so the clients' clocks do not matter. ``on_error`` says what a call does when
    Redis cannot answer: ``"raise"`` ``StoreUnavailable`` (the default; nothing is granted),
    ``"allow"`` let it through unlimited (unsafe: the quota is not kept while Redis is away), or
    a local ``Limiter`` to take from instead, until Redis answers again.

    ``timeout`` bounds every round trip (redis-py's retries included) where the caller gives no
    deadline: past it a call raises ``StoreUnavailable`` (then ``on_error``). A call with a deadline
    (``acquire(timeout=...)``) ends by it: ``TimeoutError`` if Redis has not answered by then. A round
    trip cut short grants nothing; its script may still run on the server, and the tokens it takes
    there are spent, never given back (stricter, never looser). A URL's credentials are never shown:
    not in the repr, nor in any error.

    ``lease=seconds`` leases the rates out instead: each limiter holds some of ``units`` equal
    parts of every rate and burst for ``lease`` seconds at a time, renews them before then, and
    grants from them with no round trip (see ``RedisLeaseLimiter``)."""

    __slots__ = ("_redis", "_key", "_on_error", "_scripts", "_client_clock", "_url", "_lease", "_units", "_timeout",
                 "_heads")

    def __init__(self, redis: Redis | RedisCluster | str, key: str, *, on_error: OnError | Fallback = "raise",
                 lease: float | None = None, units: int = 16, timeout: float = TIMEOUT) -> None:
        if not isinstance(key, str) or isinstance(key, bool):
            raise TypeError(f"key must be a str, got {key!r}")
        if not key:
            raise ValueError(f"key must not be empty, got {key!r}")
        if not (on_error == "raise" or on_error == "allow" or _is_fallback(on_error)):
            raise ValueError(f"on_error must be 'raise', 'allow' or a Limiter of this process or host, got "
                             f"{redacted(on_error) if isinstance(on_error, str) else on_error!r}")
        if lease is not None:
            span = _params.real("lease", lease)
            if not LEASE_SPANS[0] <= span <= LEASE_SPANS[1]:
                raise ValueError(f"lease must be from {LEASE_SPANS[0]} to {LEASE_SPANS[1]:.0f} seconds, got {lease!r}")
        if isinstance(units, bool) or not isinstance(units, int):
            raise TypeError(f"units must be an int, got {units!r}")
        if not 1 <= units <= MOST_UNITS:
            raise ValueError(f"units must be from 1 to {MOST_UNITS}, got {units!r}")
        self._timeout = _params.positive("timeout", timeout)
        client = _client(redis)
        self._redis = client
        self._url = redacted(redis) if isinstance(redis, str) else None
        self._key = key
        self._on_error: OnError | Fallback = on_error
        self._client_clock = False  # True: the scripts take the client's time, not the server's (tests)
        self._scripts: dict[str, Script] | None = None  # None: the scripts of that clock (tests give others)
        self._lease = None if lease is None else float(lease)
        self._units = units
        self._heads: dict[str, tuple[dict[str, Script], Script, tuple[str | bytes, ...]]] = {}  # by definition

    @property
    def redis(self) -> Redis | RedisCluster:
        """The client the store talks through."""
        return self._redis

    @property
    def key(self) -> str:
        """The quota's name."""
        return self._key

    @property
    def redis_key(self) -> str:
        """The Redis key of the hash that holds the limits (a window's log is this and ``:log``)."""
        return "aiotb:{" + self._key + "}"

    @property
    def on_error(self) -> OnError | Fallback:
        """What a call does when Redis cannot answer."""
        return self._on_error

    @property
    def fallback(self) -> Fallback | None:
        """The limiter ``on_error`` takes from while Redis cannot answer, if it is one."""
        return None if isinstance(self._on_error, str) else self._on_error

    @property
    def lease(self) -> float | None:
        """Seconds a limiter holds its units of the rates at a time; None: no leases, one round trip a grant."""
        return self._lease

    @property
    def units(self) -> int:
        """How many equal parts of every rate and burst a lease is counted in."""
        return self._units

    @property
    def timeout(self) -> float:
        """Seconds a round trip may take where the caller gives no deadline."""
        return self._timeout

    @property
    def capabilities(self) -> Capabilities:
        """What a limiter over it serves: every feature but the calls that must answer at once (a leased store:
        see the table of stores, docs/guides/stores.md); instants on the server's clock, one round trip a call."""
        return capabilities("RedisStore" if self._lease is None else "RedisStore(lease=)", "the Redis server's",
                            round_trip=True)

    def bind(self, rates: Sequence[tuple[float, float, float]]) -> RedisRates:
        """The rates (each ns per token, burst, initial tokens) in the store's hash: one round trip a call."""
        return RedisRates(self, definition(rates))

    def bind_window(self, period_ns: int, limit: float) -> RedisRates:
        """A sliding window of at most limit tokens in any period_ns, in the store's hash and log."""
        return RedisRates(self, window_definition(period_ns, limit))

    def bind_lease(self, rates: Sequence[tuple[float, float, float]]) -> RedisLease:
        """The rates, leased out in the store's units for its lease span at a time."""
        if self._lease is None:
            raise ValueError(f"{self!r} leases nothing: give it lease=seconds")
        return RedisLease(self, lease_definition(self._units, self._lease, rates))

    def for_key(self, key: object) -> RedisStore:
        """The store of one key of a KeyedLimiter: ``<this key>:<key>``, on the same client."""
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(f"a KeyedLimiter over a RedisStore takes str or int keys, got {key!r}")
        if self._lease is not None:
            raise refused("KeyedLimiter", "RedisStore(lease=)")
        child = object.__new__(RedisStore)
        child._redis, child._url, child._on_error = self._redis, self._url, self._on_error
        child._scripts, child._client_clock, child._timeout = self._scripts, self._client_clock, self._timeout
        child._lease, child._units, child._heads = None, self._units, {}
        child._key = f"{self._key}:{key}"
        return child

    def __repr__(self) -> str:
        more = "" if self._lease is None else f", lease={self._lease!r}, units={self._units!r}"
        if self._timeout != TIMEOUT:
            more += f", timeout={self._timeout!r}"
        if self._url is not None:
            return f"RedisStore({self._url!r}, {self._key!r}{more})"
        pool = getattr(self._redis, "connection_pool", None)
        if pool is None:  # a cluster
            return f"RedisStore(<{type(self._redis).__name__}>, {self._key!r}{more})"
        where = pool.connection_kwargs
        return f"RedisStore(<Redis {where.get('host', where.get('path'))}:{where.get('port', '')}>, {self._key!r}{more})"

    async def _run(self, definition: str, operation: str | bytes, within: float | None = None) -> list[bytes]:
        """One round trip of the script: operation (its name and words) on the limits of definition;
        the words of its reply, status first (0, 1, 3 or 4); its failures as StoreUnavailable,
        StoreCorrupt or ValueError. It ends within ``within`` seconds (TimeoutError) if that comes
        before the store's timeout (StoreUnavailable): a reply that comes later is never read (redis-py
        drops the connection it was on), so what its script took stays taken."""
        bound = self._timeout if within is None else min(max(0.0, within), self._timeout)
        script, head = self._head(definition)
        command = (*head, operation, str(time.time_ns() // 1000)) if self._client_clock else (*head, operation)
        deadline = Deadline(bound)
        try:
            with deadline:
                try:
                    reply = await self._redis.execute_command(*command)
                except _NO_SCRIPT:  # the server never saw it, or forgot it (restarted, failed over, flushed)
                    await self._redis.script_load(script.text)
                    reply = await self._redis.execute_command(*command)
        except TimeoutError as error:
            if not deadline.expired:
                raise self._unavailable(error) from error  # an OSError of the socket (ETIMEDOUT)
            if bound < self._timeout:
                raise TimeoutError(f"{self!r} did not answer within the caller's deadline ({bound:.3g} s): "
                                   f"nothing was granted") from None
            raise StoreUnavailable(f"{self!r} did not answer within its timeout ({bound:.3g} s): nothing was "
                                   f"granted from it") from error
        except _UNAVAILABLE as error:
            raise self._unavailable(error) from error
        except _REFUSED as error:
            if str(error).startswith(_BUSY):
                raise self._unavailable(error) from error
            raise StoreCorrupt(f"{self!r}: the key {self.redis_key!r} holds something that is not an aiotb "
                               f"limiter's, or the server refused the script ({error})") from error
        except _LOST as error:
            raise self._unavailable(error) from error
        except (AttributeError, TypeError) as error:
            if not _lost_connection(error):
                raise
            raise self._unavailable(error) from error
        if isinstance(reply, str):  # a client made with decode_responses=True
            reply = reply.encode()
        words = reply.split() if isinstance(reply, bytes) else []
        if not words or words[0] not in _STATUSES:
            raise StoreCorrupt(f"{self!r}: the script answered {reply!r}")
        if words[0] == b"5":
            if len(words) < 2:
                raise StoreCorrupt(f"{self!r}: the key {self.redis_key!r} is a hash that is not an aiotb limiter's")
            try:
                theirs = describe(b" ".join(words[1:]).decode())  # a definition may hold spaces
            except (ValueError, ArithmeticError) as error:
                raise StoreCorrupt(f"{self!r}: the key {self.redis_key!r} is a hash that is not an aiotb "
                                   f"limiter's") from error
            raise ValueError(f"{self!r} holds a limiter of {theirs}, not {describe(definition)}: every client must "
                             f"give it the same limits (or delete the key first)")
        return words

    def _head(self, definition: str) -> tuple[Script, tuple[str | bytes, ...]]:
        """The script of definition, and its EVALSHA up to the operation: the SHA1, the keys and the definition,
        encoded once (redis-py encodes a str on every call). Made again where a test gave the store other scripts."""
        scripts = self._scripts or (_CLIENT_CLOCK_SCRIPTS if self._client_clock else _SCRIPTS)
        made = self._heads.get(definition)
        if made is not None and made[0] is scripts:
            return made[1], made[2]
        key = self.redis_key
        keys: tuple[bytes | str, ...]
        if definition.startswith("window"):
            name, keys = "window", (b"2", key, key + ":log")
        else:
            name, keys = ("lease" if definition.startswith("lease") else "gcra"), (b"1", key)
        script = scripts[name]
        head = ("EVALSHA", script.sha.encode(), *keys, definition.encode())
        self._heads[definition] = (scripts, script, head)
        return script, head

    def _unavailable(self, error: BaseException) -> StoreUnavailable:
        """The error for a round trip the server did not answer."""
        return StoreUnavailable(f"{self!r} did not answer: nothing was granted from it ({type(error).__name__}: "
                                f"{error})")


class _Bound:
    """Limits in a RedisStore, bound to their definition (what the key's hash was made with)."""

    __slots__ = ("_store", "_definition")

    def __init__(self, store: RedisStore, definition: str) -> None:
        self._store = store
        self._definition = definition

    @property
    def store(self) -> RedisStore:
        """The store they are in."""
        return self._store

    @property
    def definition(self) -> str:
        """The script's definition string of the limits."""
        return self._definition

    async def pause(self, span_ns: int) -> int:
        """No grant for span_ns from the server's now (a later pause only moves it later); ns until its end."""
        return int((await self._store._run(self._definition, f"pause {span_ns}"))[1])


class RedisRates(_Bound):
    """A limiter's rates (or window) in a RedisStore (``store.bind``): the script's operations on them, one round
    trip each; the store's ``StoreRates``."""

    __slots__ = ()

    async def reserve(self, amount: float, wait_ns: int, hold: bool = False,
                      within: float | None = None) -> Reserved | int | None:
        """Reserves amount at the first instant every limit grants it, if that is at most wait_ns
        from now (wait_ns < 0: whenever); None if it is later. A window's grant held (until
        end_hold) if hold; the ns after which to ask again, when it would fit only once held grants
        end. ValueError above a burst; TimeoutError if no reply came within ``within`` seconds (the
        caller's deadline)."""
        operation = f"reserve {float(amount)!r} {wait_ns} {1 if hold else 0}"
        words = await self._store._run(self._definition, operation, within)
        status = words[0]
        if status == b"0":
            return Reserved(int(words[1]), b" ".join(words[3:]), int(words[3]) * 1000 + int(words[2]))
        if status == b"3":
            return None
        if status == b"4":
            return int(words[1])
        raise _too_much(self._store, amount)

    async def reserve_run(self, amount: float, wait_ns: int, then: Sequence[float],
                          within: float | None = None) -> tuple[Reserved | None, list[Reserved]]:
        """``reserve`` on rates, and if its grant is due now, each amount of ``then`` in turn while that is
        due now too: every waiter whose tokens are free now, in one round trip. The first reservation
        (None if not within wait_ns) and the grants of ``then`` made with it, each with its own record."""
        words = await self._store._run(self._definition, f"reserve {float(amount)!r} {wait_ns} 0 " + " ".join(
            repr(float(more)) for more in then), within)
        if words[0] == b"3":
            return None, []
        if words[0] != b"0":
            raise _too_much(self._store, amount)
        width = 2 * (self._definition.count(";") + 1)  # each rate's F before and after
        delay, epoch = int(words[1]), words[3]
        at = int(epoch) * 1000 + int(words[2])
        first = Reserved(delay, b" ".join(words[3:4 + width]), at)
        return first, [Reserved(delay, b" ".join([epoch, *words[i:i + width]]), at)
                       for i in range(4 + width, len(words), width)]

    async def end_hold(self, record: bytes) -> None:
        """Ends the hold of a window's grant now: from now on it is inside the windows of this instant only.
        Rates without a window hold nothing: no round trip."""
        if not self._definition.startswith("window"):
            return
        await self._store._run(self._definition, b"end_hold " + record)

    async def cancel(self, record: bytes) -> int:
        """Gives a reservation back to each rate nobody reserved from since; how many rates took it back."""
        return int((await self._store._run(self._definition, b"cancel " + record))[1])

    async def fit_delay(self, amount: float, within: float | None = None) -> int:
        """ns from now until every limit could grant amount (were held grants to end now); ValueError
        above what one grant may take; TimeoutError if no reply came within ``within`` seconds."""
        words = await self._store._run(self._definition, f"fit {float(amount)!r}", within)
        if words[0] == b"1":
            raise _too_much(self._store, amount)
        return int(words[1])

    async def tokens(self) -> float:
        """Tokens available now (the fewest over the rates; 0 while paused)."""
        return float((await self._store._run(self._definition, "tokens"))[1])

    async def limit(self, tokens: float, span_ns: int, slack_ns: int) -> None:
        """At most tokens more granted, to every client, in the span_ns from the server's now: a server's quota
        (``Limiter.limit_until`` says how it tightens, replaces or keeps a limit running, by slack_ns)."""
        await self._store._run(self._definition, f"limit {float(tokens)!r} {span_ns} {slack_ns}")

    async def settle(self, taken: float, used: float, record: bytes | None = None) -> bytes | None:
        """A grant of taken cost used (``Limiter.settle``): less, given back to each rate (never fuller than
        full); more, taken now as debt. A window's grant held by ``record`` keeps used from its instant: the
        record its hold ends with from now on, else None. ValueError if a debt would reach past 26 days or taken
        is above what a grant may take (the rate changed)."""
        words = await self._store._run(self._definition, f"settle {taken!r} {used!r}".encode() +
                                       (b" " + record if record is not None else b""))
        if words[0] == b"1":
            raise ValueError(f"used must leave each rate's debt within {MAX_PAUSE_NS} ns (26 days) and taken be "
                             f"at most what a grant may take, got taken={taken!r}, used={used!r}")
        if record is None:
            return None
        return b" ".join([*record.split(b" ")[:-1], words[1]])

    async def set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        """Changes rate index (from 0) for every client, keeping the tokens held now, at most the new burst."""
        await self._store._run(self._definition, f"set_rate {index + 1} {ns_per_token!r} {burst!r}")

    async def adapt(self, kind: Literal["cut", "grow"], age_us: int, rule: AdaptRule, served: float) -> Adapted:
        """AdaptiveLimiter's rule on the first rate, for every client (``_adaptive.py``): "cut" for a 429 or 503
        to a request sent age_us ago, "grow" for a period's worth of successes counted for age_us; served: the
        tokens this client was served in the last period."""
        least, most, decrease, increase, period_ns, client = rule
        words = await self._store._run(self._definition, f"adapt {kind} {age_us} {period_ns!r} {least!r} {most!r} "
                                                         f"{decrease!r} {increase!r} {float(served)!r} {client}")
        try:
            since = int(words[3])
            return Adapted(words[1] == b"1", float(words[2]), None if since < 0 else since)
        except (IndexError, ValueError) as error:
            raise StoreCorrupt(f"{self._store!r}: the script answered {b' '.join(words)!r}") from error

    async def set_window(self, period_ns: int, limit: float) -> None:
        """Changes a window's period and limit for every client, from now on."""
        await self._store._run(self._definition, f"set_rate {period_ns} {limit!r}")


class RedisLease(_Bound):
    """A limiter's rates leased out in units (``store.bind_lease``): the lease script's operations on them."""

    __slots__ = ()

    async def lease_units(self, holder: str, have: int, want: int, give_back: float, owed: float) -> Lease:
        """Renews holder's lease of the units of definition (or starts one), keeping ``have`` units and
        giving the rest back, each holding give_back of its burst; asks for ``want`` in all. owed: the tokens
        holder would owe at its lease's end (with have 0: what it owes now, which the key takes over)."""
        words = await self._store._run(self._definition, f"lease {holder} {have} {want} {give_back!r} {owed!r}")
        return Lease(int(words[1]), int(words[2]), words[3] == b"1", float(words[4]), int(words[5]))

    async def release_units(self, holder: str, give_back: float, owed: float) -> None:
        """Gives every unit of holder back, each holding give_back of its burst, and the tokens it owes (owed)
        to the key."""
        await self._store._run(self._definition, f"release {holder} {give_back!r} {owed!r}")

    async def owe(self, holder: str, owed: float) -> bool:
        """Tells the key that holder owes owed tokens now: kept with its lease, should it lapse; without one,
        taken over by the key (True), to be charged to the next holder of units."""
        words = await self._store._run(self._definition, f"owe {holder} {owed!r}")
        return int(words[1]) == 1


def _too_much(store: RedisStore, amount: float) -> ValueError:
    """The error for an amount above what one grant of store's limits may take."""
    return ValueError(f"amount must not exceed what one grant of {store!r} may take, got {amount!r}")


def definition(rates: Sequence[tuple[float, float, float]]) -> str:
    """The script's definition of rates given as (ns_per_token, burst, initial)."""
    return ";".join(f"{ns!r},{burst!r},{initial!r}" for ns, burst, initial in rates)


def _lost_connection(error: BaseException) -> bool:
    """Whether error is asyncio's own, from a write on a transport whose connection was lost: Python 3.13's
    selector transport raises AttributeError or TypeError there (CPython gh-136234)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    code = frame.tb_frame.f_code if frame is not None else None
    return code is not None and code.co_name == "writelines" and "asyncio" in code.co_filename


def lease_definition(units: int, span: float, rates: Sequence[tuple[float, float, float]]) -> str:
    """The lease script's definition of rates leased out in units for span seconds at a time."""
    return f"lease {units} {round(span * 1e6)} {definition(rates)}"


def window_definition(period_ns: int, limit: float) -> str:
    """The window script's definition of a window."""
    return f"window {period_ns} {limit!r}"


def describe(definition: str) -> str:
    """A definition, in words; ValueError or ArithmeticError for one that is not aiotb's."""
    if definition.startswith("window "):
        _, period_ns, limit = definition.split()
        return f"a window of at most {float(limit):.6g} in any {int(period_ns) / 1e9:.6g} s"
    if definition.startswith("lease "):
        _, units, span_us, rates = definition.split(" ", 3)
        return f"{describe(rates)} leased in {int(units)} units for {int(span_us) / 1e6:.6g} s"
    parts = []
    for rate in definition.split(";"):
        ns, burst, initial = (float(x) for x in rate.split(","))
        parts.append(f"{1e9 / ns:.6g}/s burst {burst:.6g} initial {initial:.6g}")
    return "rates [" + ", ".join(parts) + "]"


def _client(redis: object) -> Redis | RedisCluster:
    """A redis.asyncio client from a client or a URL, or TypeError/RuntimeError."""
    try:
        from redis.asyncio import Redis, RedisCluster
    except ImportError as error:
        raise RuntimeError("RedisStore needs redis-py 5 or later: pip install 'aiotb[redis]'") from error
    if isinstance(redis, str):
        if not redis.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"redis must be a redis.asyncio.Redis or RedisCluster client or a redis:// URL, "
                             f"got {redacted(redis)!r}")
        try:
            return Redis.from_url(redis)
        except ValueError:  # its message may quote the URL
            raise ValueError(f"redis must be a URL redis-py can read, got {redacted(redis)!r}") from None
    if not isinstance(redis, (Redis, RedisCluster)):
        raise TypeError(f"redis must be a redis.asyncio.Redis or RedisCluster client or a redis:// URL, got {redis!r}")
    return redis


def redacted(url: str) -> str:
    """url without its credentials: a user and password become ``***``, as do the values of ``username``
    and ``password`` in its query."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return url.partition(":")[0] + "://***"
    netloc = parts.netloc if "@" not in parts.netloc else "***@" + parts.netloc.rpartition("@")[2]
    hidden = [(name, "***" if name.lower() in ("username", "password") else value) for name, value in query]
    return parts._replace(netloc=netloc, query=urlencode(hidden, safe="*")).geturl()


def _is_fallback(value: object) -> bool:
    """Whether value can stand in for Redis: a limiter (try_acquire and acquire) whose store is not a RedisStore,
    so that it answers at once."""
    return (not isinstance(value, (str, bytes)) and callable(getattr(value, "try_acquire", None))
            and callable(getattr(value, "acquire", None)) and not isinstance(getattr(value, "store", None), RedisStore))
