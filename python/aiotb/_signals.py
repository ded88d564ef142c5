"""What an HTTP response's headers say about the server's rate limit, read into one immutable ``Signals``.

The fields read, by name, case-insensitive:

- the IETF draft (draft-ietf-httpapi-ratelimit-headers-08 to -11): ``RateLimit: "default";r=50;t=30``
  (r: remaining, t: seconds to the reset) with ``RateLimit-Policy: "default";q=100;w=60`` (q: the quota);
  a policy whose quota unit ``qu`` is not requests is left out. Its older drafts' ``RateLimit-Limit``,
  ``RateLimit-Remaining`` and ``RateLimit-Reset``;
- the de-facto ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset``;
- OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go durations (``6m0s``);
- Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``,
  resets as RFC 3339 instants;
- ``Retry-After``, delta seconds or an HTTP date.

A reset number from ``EPOCH_FROM`` (10**9, 2001-09-09) on is an epoch instant in seconds, below it delta
seconds: no delta is 31 years, and every epoch instant now is past it. Absolute instants are taken against
the server's ``Date`` when it sent a readable one, else against the local clock, so that a skewed clock does
not skew the wait; one in the past is a wait of 0.

Where several fields or list members speak of one quota, the most restrictive wins whole (its remaining,
reset and limit together): the least remaining, the later reset breaking a tie. Nothing here raises for what
headers hold: a malformed, negative, non-finite or absurd value (a count above ``MOST``, a wait above
``LONGEST_WAIT``) is ignored and the rest still read."""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import math
import re
from collections.abc import Iterable, Mapping
from typing import Callable, Literal, NamedTuple, cast

from . import _params
from ._clock import loop_now, wall_now

EPOCH_FROM = 1e9  # a reset number this large is an epoch instant in seconds, not delta seconds
LONGEST_WAIT = 366 * 86400.0  # s: a reset or retry further away than a year is absurd, and ignored
MOST = 2.0**53  # the largest count read: past it a float no longer counts by ones
NAMES_KEPT = 4096  # names as sent that _fields remembers: past it (a server sending ever new ones), none more

Headers = Mapping[str, str | bytes] | Iterable[tuple[str | bytes, str | bytes]]
QuotaKind = Literal["requests", "tokens", "input_tokens", "output_tokens"]  # the quotas Signals tells of
QUOTAS: tuple[QuotaKind, ...] = ("requests", "tokens", "input_tokens", "output_tokens")


class Quota(NamedTuple):
    """One quota as the server tells it: what is left, when it is whole again, out of how many."""

    remaining: float  # requests or tokens left, >= 0
    reset_after: float | None  # s from parsing until the quota resets, >= 0; None if not told
    limit: float | None  # the whole quota of a window; None if not told


@dataclasses.dataclass(frozen=True)
class Signals:
    """What a response's headers say of the server's limits, times in seconds from parsing; falsy if nothing."""

    requests: Quota | None = None
    tokens: Quota | None = None  # OpenAI's tokens, Anthropic's most restrictive token quota
    input_tokens: Quota | None = None  # Anthropic's
    output_tokens: Quota | None = None  # Anthropic's
    retry_after: float | None = None  # s to wait before asking again, >= 0

    def __bool__(self) -> bool:
        """Whether the headers said anything of the server's limits."""
        return self != Signals()


def _fields(headers: Headers) -> dict[str, list[str]]:
    """The values, in order, of each field read here (``_READ``), by lower-case name; an entry that is no (name,
    value) of text skipped. A name as sent is looked up in ``_NAMES`` (most responses hold none of the fields read
    here, and a server sends the same names each time), so that every other field costs one lookup; the
    values read are not decoded until then."""
    pairs: Iterable[object] = headers.items() if isinstance(headers, Mapping) else headers
    fields: dict[str, list[str]] = {}
    names = _NAMES
    for pair in pairs:
        if type(pair) is not tuple or len(pair) != 2:
            continue
        name, value = pair
        key = names.get(name) if type(name) is bytes or type(name) is str else None
        if key is None:
            key = _read_as(name)
        if not key:
            continue
        if isinstance(value, bytes):
            text = value.decode("latin-1").strip()
        elif isinstance(value, str):
            text = value.strip()
        else:
            continue
        known = fields.get(key)
        if known is None:
            fields[key] = [text]
        else:
            known.append(text)
    return fields


def _read_as(name: object) -> str:
    """The lower-case name of the field read here that name (as sent) is, "" for any other; remembered in
    ``_NAMES`` for a name of exactly bytes or str, while it holds fewer than ``NAMES_KEPT``."""
    if isinstance(name, bytes):
        key = _READ_BYTES.get(name.strip().lower(), "")
    elif isinstance(name, str):
        key = name.strip().lower()
        key = key if key in _READ else ""
    else:
        return ""
    if (type(name) is bytes or type(name) is str) and len(_NAMES) < NAMES_KEPT:
        _NAMES[name] = key
    return key


def _first(fields: dict[str, list[str]], name: str) -> str | None:
    """The first value of a field, or None if it is absent."""
    values = fields.get(name)
    return values[0] if values else None


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _number(text: str | None, most: float = MOST) -> float | None:
    """The number >= 0 leading a value (a list's first member, parameters dropped); None if absent,
    malformed or above most."""
    if text is None:
        return None
    if text.isdigit() and text.isascii():  # the common case: a whole number alone
        value = float(text)
        return value if value <= most else None
    first = text.split(",", 1)[0].split(";", 1)[0].strip()
    if not _NUMBER.fullmatch(first):
        return None
    value = float(first)
    return value if value <= most else None


def _wait(span: float) -> float | None:
    """A span to wait, 0 for one already past; None if not a number or beyond LONGEST_WAIT."""
    return max(0.0, span) if span <= LONGEST_WAIT else None


ServerNow = Callable[[], datetime.datetime]  # the server's clock, read from its Date field only if asked


def _reset_number(text: str | None, server_now: ServerNow) -> float | None:
    """Seconds to a reset given as delta seconds or, from EPOCH_FROM on, as an epoch instant in seconds."""
    value = _number(text, math.inf)
    if value is None:
        return None
    return _wait(value - server_now().timestamp() if value >= EPOCH_FROM else value)


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(h|ms|m|s|us|µs|μs|ns)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}


def _duration(text: str | None, server_now: ServerNow) -> float | None:
    """Seconds in a Go duration (``6m0s``, ``1h2m3.5s``, ``20ms``) or in plain seconds; None if malformed."""
    if text is None:
        return None
    if _NUMBER.fullmatch(text):
        return _wait(float(text))
    if not _DURATION.fullmatch(text):
        return None
    return _wait(sum(float(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(text)))


def _instant(text: str | None, server_now: ServerNow) -> float | None:
    """Seconds from server_now to an RFC 3339 instant (with its offset); None if malformed."""
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return _wait((when - server_now()).total_seconds()) if when.tzinfo is not None else None


def _server_date(fields: dict[str, list[str]]) -> datetime.datetime | None:
    """The server's clock as its Date field tells it; None without a readable one."""
    text = _first(fields, "date")
    if text is None:
        return None
    try:
        date = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return date if date.tzinfo is not None else date.replace(tzinfo=datetime.timezone.utc)


def _retry_after(text: str | None, server_now: ServerNow) -> float | None:
    """Seconds a Retry-After value asks to wait, an HTTP date taken against server_now; None if malformed."""
    if text is None:
        return None
    try:
        return _wait(_params.retry_after(text, server_now()))
    except ValueError:
        return None


_STRINGS_CLOSED = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^"])*')
_MEMBER = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^,"])+')
_BARE = r'"(?:[^"\\]|\\.)*"|[A-Za-z*][A-Za-z0-9!#$%&\'*+.^_`|~:/-]*|-?[0-9]+(?:\.[0-9]+)?|:[A-Za-z0-9+/=]*:|\?[01]'
_PARAMETER = re.compile(rf"\s*;\s*([a-z*][a-z0-9_.*-]*)(?:=({_BARE}))?")
_ITEM = re.compile(rf"\s*({_BARE})((?:{_PARAMETER.pattern})*)\s*")
_ESCAPE = re.compile(r"\\(.)")


def _unquote(bare: str) -> str:
    """A bare item's text: a string's content unescaped, any other item as written."""
    return _ESCAPE.sub(r"\1", bare[1:-1]) if bare.startswith('"') else bare


def _items(field: str) -> list[tuple[str, dict[str, str]]]:
    """The items of a structured-field list with their parameters; a malformed member left out, and the
    whole field if a string is left open."""
    if not _STRINGS_CLOSED.fullmatch(field):
        return []
    items = []
    for member in _MEMBER.findall(field):
        item = _ITEM.fullmatch(member)
        if item:
            items.append((_unquote(item[1]), {key: _unquote(value) for key, value in _PARAMETER.findall(item[2])}))
    return items


def _tightest(quotas: list[Quota]) -> Quota | None:
    """The most restrictive quota: the least remaining, the later reset breaking a tie; None if none."""
    if len(quotas) < 2:
        return quotas[0] if quotas else None
    return min(quotas, key=lambda quota: (quota.remaining, -(quota.reset_after or 0.0)), default=None)


def _draft(fields: dict[str, list[str]], server_now: ServerNow) -> Quota | None:
    """The most restrictive request quota of the RateLimit field, its limit the q of the RateLimit-Policy
    item of the same name; None if there is none."""
    policies = dict(_items(", ".join(fields.get("ratelimit-policy", []))))
    quotas = []
    for name, parameters in _items(", ".join(fields.get("ratelimit", []))):
        policy = policies.get(name, {})
        remaining = _number(parameters.get("r"))
        if remaining is not None and policy.get("qu", "request") in ("request", "requests"):
            quotas.append(Quota(remaining, _reset_number(parameters.get("t"), server_now), _number(policy.get("q"))))
    return _tightest(quotas)


ResetReader = Callable[[str | None, ServerNow], float | None]
_ANTHROPIC_KINDS = {"requests": "requests", "tokens": "tokens", "input_tokens": "input-tokens",
                    "output_tokens": "output-tokens"}
# (kind, remaining field, reset field, limit field, how its reset reads), one line a quota a style tells
_STYLES: list[tuple[str, str, str, str, ResetReader]] = [
    ("requests", "ratelimit-remaining", "ratelimit-reset", "ratelimit-limit", _reset_number),
    ("requests", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-limit", _reset_number),
    *((kind, f"x-ratelimit-remaining-{kind}", f"x-ratelimit-reset-{kind}", f"x-ratelimit-limit-{kind}", _duration)
      for kind in ("requests", "tokens")),
    *((kind, f"anthropic-ratelimit-{name}-remaining", f"anthropic-ratelimit-{name}-reset",
       f"anthropic-ratelimit-{name}-limit", _instant) for kind, name in _ANTHROPIC_KINDS.items()),
]


_READ = frozenset({"ratelimit", "ratelimit-policy", "retry-after", "date",
                   *(field for _, *names, _ in _STYLES for field in names)})  # every field read here, lower-case
# a style's remaining field: (kind, its reset field, its limit field, how its reset reads)
_REMAINING = {remaining: (kind, reset, limit, read) for kind, remaining, reset, limit, read in _STYLES}
_READ_BYTES = {name.encode("latin-1"): name for name in _READ}
_NAMES: dict[str | bytes, str] = {}  # a field's name as sent: the name it is read by here, "" if not read
_NOTHING = Signals()


def _server_clock(fields: dict[str, list[str]], now: datetime.datetime | Callable[[], datetime.datetime]) -> ServerNow:
    """The server's clock: its Date field, else now (or what the function now reads), read once, when first asked."""
    known: list[datetime.datetime] = []

    def server_now() -> datetime.datetime:
        if not known:
            date = _server_date(fields)
            known.append(date if date is not None else now() if callable(now) else now)
        return known[0]

    return server_now


def _quotas(fields: dict[str, list[str]], server_now: ServerNow) -> dict[str, list[Quota]]:
    """Every quota the fields tell of, by kind ("requests", "tokens", ...)."""
    found: dict[str, list[Quota]] = {}
    draft = _draft(fields, server_now) if "ratelimit" in fields else None
    if draft is not None:
        found["requests"] = [draft]
    for field, values in fields.items():
        style = _REMAINING.get(field)
        if style is None:
            continue
        remaining = _number(values[0])
        if remaining is not None:
            kind, reset_field, limit_field, read_reset = style
            found.setdefault(kind, []).append(Quota(remaining, read_reset(_first(fields, reset_field), server_now),
                                                    _number(_first(fields, limit_field))))
    return found


def _check_now(now: datetime.datetime | Callable[[], datetime.datetime]) -> None:
    """ValueError unless now is a function or a timezone-aware datetime."""
    if not callable(now) and (now.tzinfo is None or now.utcoffset() is None):
        raise ValueError(f"now must be a timezone-aware datetime, got {now!r}")


def read_signals(headers: Headers, now: datetime.datetime | Callable[[], datetime.datetime]) -> Signals:
    """What a response's headers say of the server's limits, in seconds from now, the local wall clock
    (timezone-aware, or ValueError), or the function that reads it (called only if an absolute instant is
    read without the server's Date). Raises nothing for anything the headers hold."""
    _check_now(now)
    fields = _fields(headers)
    if not fields or len(fields) == 1 and "date" in fields:
        return _NOTHING
    server_now = _server_clock(fields, now)
    found = _quotas(fields, server_now)
    retry = fields.get("retry-after")
    if not found:
        return Signals(retry_after=_retry_after(retry[0], server_now)) if retry else _NOTHING
    return Signals(requests=_tightest(found.get("requests", [])), tokens=_tightest(found.get("tokens", [])),
                   input_tokens=_tightest(found.get("input_tokens", [])),
                   output_tokens=_tightest(found.get("output_tokens", [])),
                   retry_after=_retry_after(retry[0], server_now) if retry else None)


def read_quota(headers: Headers, quota: QuotaKind,
               now: datetime.datetime | Callable[[], datetime.datetime]) -> Quota | None:
    """``getattr(read_signals(headers, now), quota)``, without reading what the headers say of anything else."""
    _check_now(now)
    fields = _fields(headers)
    if not fields or len(fields) == 1 and "date" in fields:
        return None
    return _tightest(_quotas(fields, _server_clock(fields, now)).get(quota, []))


# ---- what a limiter follows: what is left of a quota, by the loop's clock ----

def _checked_follow(headers: object, quota: object, in_flight: object) -> float:
    """in_flight as a float, once headers, quota and in_flight are checked: TypeError/ValueError for any."""
    if type(headers) not in (list, dict) and (isinstance(headers, (str, bytes))
                                              or not isinstance(headers, (Mapping, Iterable))):
        raise TypeError(f"headers must be a mapping of header names to values or (name, value) pairs, got {headers!r}")
    if quota not in QUOTAS:
        raise ValueError(f"quota must be one of {', '.join(map(repr, QUOTAS))}, got {quota!r}")
    return _params.non_negative("in_flight", in_flight)


def _left_until(told: Quota | None, in_flight: float) -> tuple[float, float] | None:
    """The tokens of a quota told left less in_flight, and the loop time of its reset; None without a reset."""
    if told is None or told.reset_after is None:
        return None
    return max(0.0, told.remaining - in_flight), loop_now() + told.reset_after


def quota_and_left(headers: Headers, quota: object, in_flight: object) -> tuple[Signals, tuple[float, float] | None]:
    """What headers say (read now), and the tokens of quota left of it less in_flight with the loop time of its
    reset (None if they tell of neither); TypeError/ValueError for quota or in_flight."""
    since = _checked_follow(headers, quota, in_flight)
    signals = read_signals(headers, wall_now)
    return signals, _left_until(getattr(signals, cast(str, quota)), since)


def quota_left(headers: Headers, quota: QuotaKind, in_flight: float) -> tuple[float, float] | None:
    """``quota_and_left`` without the rest of what the headers say, for the HTTP adapters: what ``follow`` would
    limit to (tokens, loop time), or None."""
    since = _checked_follow(headers, quota, in_flight)
    return _left_until(read_quota(headers, quota, wall_now), since)
