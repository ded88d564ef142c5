"""What each store serves, in one table: a feature a store does not serve is refused from here, with its
reason, and the table of stores of README.md and docs/guides/stores.md says the same (tests/test_layout.py
compares them)."""

from __future__ import annotations

from typing import Literal, NamedTuple

Store = Literal["in process", "SharedMemoryStore", "RedisStore", "RedisStore(lease=)"]
STORES: tuple[Store, ...] = ("in process", "SharedMemoryStore", "RedisStore", "RedisStore(lease=)")

# every feature, in the order of the table of stores
FEATURES = (
    "async with, acquire(timeout=), decorators, slot",
    "try_acquire, has_capacity, tokens",
    "atry_acquire, ahas_capacity, read_tokens",
    "several rates at once",
    "set_rate / aset_rate",
    "penalize, retry_after / apenalize, aretry_after",
    "pause_until / apause_until",
    "limit_until, follow / alimit_until, afollow",
    "settle / asettle",
    "reserve / areserve",
    "threads: acquire_blocking, with limiter",
    "several event loops",
    "WindowLimiter",
    "AsyncLimiter",
    "KeyedLimiter",
    "AdaptiveLimiter",
)

_ROUND_TRIP = "these need a round trip to Redis: await atry_acquire, ahas_capacity, read_tokens"
# not a refusal of the table: the message of a call from a loop other than the one a limiter over a RedisStore
# serves, when that one is not running (not closed either: then the limiter serves the new one)
OTHER_LOOP = ("a limiter over a RedisStore serves the event loop it is first used on (its redis.asyncio client belongs "
              "to it), and calls from other loops wait there while it runs: this one is not running")

_AIOLIMITER = ("AsyncLimiter is aiolimiter's limiter, whose has_capacity answers at once, which over Redis needs a round "
               "trip; use Limiter(max_rate, time_period, burst=max_rate, fair=False), or AsyncLimiter over a "
               "SharedMemoryStore for the processes of one host")

# (feature, store): why it is not served there
REFUSED: dict[tuple[str, Store], str] = {
    ("try_acquire, has_capacity, tokens", "RedisStore"): _ROUND_TRIP,
    ("try_acquire, has_capacity, tokens", "RedisStore(lease=)"): _ROUND_TRIP,
    ("set_rate / aset_rate", "RedisStore(lease=)"):
        "a limiter over a leased RedisStore keeps the rates the key was made with (they are split among its "
        "holders)",
    ("limit_until, follow / alimit_until, afollow", "RedisStore(lease=)"):
        "a limiter over a leased RedisStore grants from units of the rates it holds, which a limit of the "
        "server's quota would have to reach at every holder's renewal; give it RedisStore(redis, key) "
        "without lease=",
    ("reserve / areserve", "RedisStore(lease=)"):
        "a limiter over a leased RedisStore grants from the units this process holds for a while, which a "
        "reservation would outlive; use acquire(amount, timeout=...)",
    ("WindowLimiter", "SharedMemoryStore"):
        "WindowLimiter takes no SharedMemoryStore: a sliding window must know the instant of every grant in it, "
        "which no compare-and-swap of one word keeps; Limiter(max_rate, time_period, burst=...) over the store "
        "keeps burst + rate * t in every interval",
    ("WindowLimiter", "RedisStore(lease=)"):
        "WindowLimiter takes no leased RedisStore: a window's grants must all be logged in one place; give it "
        "RedisStore(redis, key) without lease=",
    ("AsyncLimiter", "RedisStore"): _AIOLIMITER,
    ("AsyncLimiter", "RedisStore(lease=)"): _AIOLIMITER,
    ("KeyedLimiter", "SharedMemoryStore"):
        "KeyedLimiter takes no SharedMemoryStore: each key would need a shared-memory object of its own, which no "
        "process may remove while another may still use it, so every key ever seen would stay in memory until a "
        "reboot; a RedisStore keeps one hash per key, which expires once full",
    ("AdaptiveLimiter", "RedisStore(lease=)"):
        "AdaptiveLimiter takes no leased RedisStore: a leased key keeps the rates it was made with, split among its "
        "holders (set_rate is refused there too); give it RedisStore(redis, key) without lease=",
    ("KeyedLimiter", "RedisStore(lease=)"):
        "KeyedLimiter takes no leased RedisStore: a lease per key would renew every key of every client; give it "
        "RedisStore(redis, key) without lease=",
}


def refusal(feature: str, store: Store) -> str:
    """Why feature is not served over store ("" where it is). KeyError for a feature not in the table."""
    if feature not in FEATURES or store not in STORES:
        raise KeyError((feature, store))
    return REFUSED.get((feature, store), "")


def refused(feature: str, store: Store) -> TypeError:
    """The error of a call of feature over a store that does not serve it."""
    return TypeError(refusal(feature, store))


class Capabilities(NamedTuple):
    """What a store serves (``store.capabilities``): its column of the table above, and how it answers."""

    kind: Store         # its column of the table
    clock: str          # the clock its instants are on
    round_trip: bool    # its rates answer after a round trip (their calls suspend), else at once
    window: bool        # WindowLimiter over it
    keys: bool          # KeyedLimiter over it (a store per key: ``for_key``)
    threads: bool       # threads blocked on a limiter over it (acquire_blocking, with limiter)


def capabilities(kind: Store, clock: str, round_trip: bool) -> Capabilities:
    """A store's capabilities: of the table's features, those its column serves."""
    return Capabilities(kind, clock, round_trip, not refusal("WindowLimiter", kind), not refusal("KeyedLimiter", kind),
                        not refusal("threads: acquire_blocking, with limiter", kind))
