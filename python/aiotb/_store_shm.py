"""``SharedMemoryStore``: a limiter's rates in a named POSIX shared-memory object, shared by the
processes of one host (src/_tokenbucket/shm.h: one 64-bit word per rate, changed by compare-and-swap,
no lock a killed process could leave held).

The first process to use a name creates the object and publishes the rates; the others join it,
and must ask for the very rates it was created with (``ValueError`` naming both otherwise). A
name holding anything else (another program's object, a corrupt one) is ``StoreCorrupt``, never a
crash. An object this process did not create is joined only if its owner is this process's user
(or one of ``trusted_uids``) and its permissions are within ``mode``: anyone may create a name
first, and a squatter's object is ``PermissionError``, naming its owner and mode. Needs the C
engine: pure Python has no compare-and-swap on shared memory."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Sequence

from ._capabilities import Capabilities, capabilities, refused
from ._core import IMPLEMENTATION
from ._store import StoreCorrupt

if TYPE_CHECKING:
    from ._shm_rates import SharedRates
    from ._tokenbucket import Segment

JOIN_WAIT = 2.0  # s: how long a joiner waits for the creator to size, open to it and publish the object
_SEGMENT_SPAN = 2**55  # ns: the longest full refill (burst * ns per token) a segment holds (SHM_MAX_SPAN)
_UID_LIMIT = 2**32
_NAME_BYTES = 200  # NAME_MAX is 255 with the leading "/"; leave room for the system's own prefix


class SharedMemoryStore:
    """``Limiter(100, 1, burst=10, store=SharedMemoryStore("partner-api"))``: one quota for every
    process of this host that builds its limiter with that store name and the same rates.

    ``name`` names a POSIX shared-memory object (``/dev/shm/<name>`` on Linux), created with
    permission bits ``mode`` exactly (the process's umask does not apply) by the first process to
    use it. It lasts until ``SharedMemoryStore.unlink(name)``, or a reboot, so that workers that
    come and go share one state.

    An object another process created is joined only if it is owned by this process's effective
    user or by one of ``trusted_uids`` (a deployment whose services run as several users names
    them: ``mode=0o660, trusted_uids=[1001]``), and has no permission bit beyond ``mode``;
    otherwise ``PermissionError`` names its owner and mode."""

    __slots__ = ("_name", "_mode", "_trusted_uids")

    def __init__(self, name: str, *, mode: int = 0o600, trusted_uids: Iterable[int] = ()) -> None:
        self._name = _checked_name(name)
        if isinstance(mode, bool) or not isinstance(mode, int):
            raise TypeError(f"mode must be an int of permission bits, got {mode!r}")
        if not 0 <= mode <= 0o777:
            raise ValueError(f"mode must be permission bits between 0 and 0o777, got {mode!r}")
        self._mode = mode
        self._trusted_uids = _checked_uids(trusted_uids)

    @property
    def name(self) -> str:
        """The shared-memory object's name, without its leading slash."""
        return self._name

    @property
    def mode(self) -> int:
        """The permission bits the object is created with."""
        return self._mode

    @property
    def trusted_uids(self) -> tuple[int, ...]:
        """The users besides this process's whose objects it joins."""
        return self._trusted_uids

    @staticmethod
    def unlink(name: str) -> bool:
        """Removes the named object: processes that have it mapped go on with it, the next one to
        use the name starts afresh. True if it existed, False if not."""
        return _segment_type().unlink("/" + _checked_name(name))

    def __repr__(self) -> str:
        trusted = f", trusted_uids={list(self._trusted_uids)}" if self._trusted_uids else ""
        return f"SharedMemoryStore({self._name!r}, mode={self._mode:#o}{trusted})"

    @property
    def capabilities(self) -> Capabilities:
        """What a limiter over it serves (see the table of stores, docs/guides/stores.md); instants on
        CLOCK_MONOTONIC, which every process of the host shares; every call answered at once."""
        return capabilities("SharedMemoryStore", "CLOCK_MONOTONIC", round_trip=False)

    def bind(self, rates: Sequence[tuple[float, float, float]]) -> SharedRates:
        """The rates (each ns per token, burst, initial tokens) in the named object: created with them, or
        joined (ValueError if it holds other rates)."""
        from ._shm_rates import SharedRates

        return SharedRates(self, self._open(tuple(rates)))

    def for_key(self, key: object) -> SharedMemoryStore:
        """Not here: a key would need an object of its own, which no process could remove (TypeError)."""
        raise refused("KeyedLimiter", "SharedMemoryStore")

    def _open(self, rates: tuple[tuple[float, float, float], ...]) -> Segment:
        """The object mapped, created with rates or joined with the same rates."""
        from ._tokenbucket import SHM_EFOREIGN, SHM_EMISMATCH, SHM_ENOTREADY, SHM_OK

        self._check_spans(rates)
        segment_type, path = _segment_type(), "/" + self._name
        give_up = time.monotonic() + JOIN_WAIT
        created: tuple[tuple[float, float, float], ...] = ()
        while True:
            denied = False
            try:
                segment = segment_type(path, self._mode)
            except BlockingIOError:  # created, not sized yet
                status = SHM_ENOTREADY
            except PermissionError:  # another user's, not yet given its mode, or never to be opened by this one
                status, denied = SHM_ENOTREADY, True
            else:
                if segment.created:
                    status = segment.create(rates)
                    if status != SHM_OK:  # published nothing: the name goes, so that it stays usable
                        segment.close()
                        segment_type.unlink(path)
                        raise ValueError(f"{self!r} cannot hold rates {_describe(rates)}")
                    return segment
                self._check_owner(segment)
                status = segment.join(rates)
                if status == SHM_OK:
                    return segment
                if status == SHM_EMISMATCH:
                    created = segment.created_rates()
                segment.close()
            if status != SHM_ENOTREADY or time.monotonic() > give_up:
                break
            time.sleep(0.001)
        if denied:
            raise PermissionError(f"{self!r} names a shared-memory object this user (uid {os.geteuid()}) may not "
                                  f"open{self._found()}: remove it (as its owner or root) if it is not yours")
        if status == SHM_EMISMATCH:
            raise ValueError(f"{self!r} holds a limiter of rates {_describe(created)}, not {_describe(rates)}: "
                             f"every process must give it the same rates (or unlink it first)")
        if status == SHM_ENOTREADY:
            raise StoreCorrupt(f"{self!r} was created but never published within {JOIN_WAIT} s (its creator died "
                               f"while creating it?): remove it with SharedMemoryStore.unlink({self._name!r})")
        if status == SHM_EFOREIGN:
            raise StoreCorrupt(f"{self!r} names a shared-memory object that is not an aiotb limiter's, one that "
                               f"another version of aiotb made (its layout differs: every process must run the same "
                               f"aiotb), a corrupt one, or one being fought over: remove it with "
                               f"SharedMemoryStore.unlink({self._name!r}) if it is not in use")
        raise ValueError(f"{self!r} cannot hold rates {_describe(rates)}")

    def _check_spans(self, rates: tuple[tuple[float, float, float], ...]) -> None:
        """ValueError for a rate whose full refill is longer than a segment holds: before any name is made."""
        for ns_per_token, burst, _ in rates:
            span = ns_per_token * burst
            if span > _SEGMENT_SPAN:
                raise ValueError(f"{self!r} cannot hold rates {_describe(rates)}: a rate refills in "
                                 f"2**{math.log2(span):.4g} ns, a shared "
                                 f"segment in at most 2**55 ns (about 1.14 years)")

    def _check_owner(self, segment: Segment) -> None:
        """PermissionError, closing segment, unless this user or a trusted one owns it with no permission
        beyond mode."""
        owner, mode = segment.owner, segment.mode
        hints = []
        if owner != os.geteuid() and owner not in self._trusted_uids:
            hints.append(f"trusted_uids=({owner},)")
        if mode & ~self._mode:
            hints.append(f"mode={mode:#o}")
        if hints:
            segment.close()
            raise PermissionError(f"{self!r} names a shared-memory object of mode {mode:#o}, owned by uid {owner}, "
                                  f"that this process (uid {os.geteuid()}) did not create: another user may have "
                                  f"made the name first. Remove it if it is not yours; if it is, give the store "
                                  f"{' and '.join(hints)}")

    def _found(self) -> str:
        """The owner and mode of the object named, as far as this process can see them."""
        try:
            found = os.stat(f"/dev/shm/{self._name}")
        except OSError:
            return ""
        return f" (mode {found.st_mode & 0o7777:#o}, owned by uid {found.st_uid})"


def _checked_name(name: object) -> str:
    """A name for a shared-memory object, or TypeError/ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {name!r}")
    if not name or "/" in name or "\0" in name or len(name.encode()) > _NAME_BYTES:
        raise ValueError(f"name must be 1 to {_NAME_BYTES} bytes with no '/' or NUL, got {name!r}")
    return name


def _checked_uids(uids: object) -> tuple[int, ...]:
    """User ids as a tuple, or TypeError/ValueError naming trusted_uids."""
    if isinstance(uids, (str, bytes)) or not isinstance(uids, Iterable):
        raise TypeError(f"trusted_uids must be an iterable of user ids, got {uids!r}")
    checked = tuple(uids)
    for uid in checked:
        if isinstance(uid, bool) or not isinstance(uid, int):
            raise TypeError(f"trusted_uids must hold int user ids, got {uid!r} in {uids!r}")
        if not 0 <= uid < _UID_LIMIT:
            raise ValueError(f"trusted_uids must hold user ids from 0 to 2**32 - 1, got {uid!r}")
    return checked


def _segment_type() -> type[Segment]:
    """The C engine's Segment, or RuntimeError where there is none."""
    if IMPLEMENTATION == "c":
        from . import _tokenbucket

        segment = getattr(_tokenbucket, "Segment", None)
        if segment is not None:
            return segment  # type: ignore[no-any-return]
    raise RuntimeError("SharedMemoryStore needs aiotb's C engine on a system with POSIX shared memory; "
                       f"this aiotb runs on its {IMPLEMENTATION!r} engine")


def _describe(rates: tuple[tuple[float, float, float], ...]) -> str:
    """Rates as (ns_per_token, burst, initial), in words."""
    return "[" + ", ".join(f"{1e9 / ns:.6g}/s burst {burst:.6g} initial {initial:.6g}"
                           for ns, burst, initial in rates) + "]"
