"""``SharedMemoryStore``: a limiter's rates in a named POSIX shared-memory object, shared by the
processes of one host (src/_tokenbucket/shm.h: one 64-bit word per rate, changed by compare-and-swap,
no lock a killed process could leave held).

The first process to use a name creates the object and publishes the rates; the others join it,
and must ask for the very rates it was created with (``ValueError`` naming both otherwise). A
name holding anything else (another program's object, a corrupt one) is ``StoreCorrupt``, never a
crash. Needs the C engine: pure Python has no compare-and-swap on shared memory."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._core import IMPLEMENTATION
from ._store import StoreCorrupt

if TYPE_CHECKING:
    from ._tokenbucket import Segment

JOIN_WAIT = 2.0  # s: how long a joiner waits for the creator to size and publish the object
_NAME_BYTES = 200  # NAME_MAX is 255 with the leading "/"; leave room for the system's own prefix


class SharedMemoryStore:
    """``Limiter(100, 1, burst=10, store=SharedMemoryStore("partner-api"))``: one quota for every
    process of this host that builds its limiter with that store name and the same rates.

    ``name`` names a POSIX shared-memory object (``/dev/shm/<name>`` on Linux), created with
    permission bits ``mode`` (less the process's umask) by the first process to use it. It lasts
    until ``SharedMemoryStore.unlink(name)``, or a reboot, so that workers that come and go share
    one state."""

    __slots__ = ("_name", "_mode")

    def __init__(self, name: str, *, mode: int = 0o600) -> None:
        self._name = _checked_name(name)
        if isinstance(mode, bool) or not isinstance(mode, int):
            raise TypeError(f"mode must be an int of permission bits, got {mode!r}")
        if not 0 <= mode <= 0o777:
            raise ValueError(f"mode must be permission bits between 0 and 0o777, got {mode!r}")
        self._mode = mode

    @property
    def name(self) -> str:
        """The shared-memory object's name, without its leading slash."""
        return self._name

    @property
    def mode(self) -> int:
        """The permission bits the object is created with."""
        return self._mode

    @staticmethod
    def unlink(name: str) -> bool:
        """Removes the named object: processes that have it mapped go on with it, the next one to
        use the name starts afresh. True if it existed, False if not."""
        return _segment_type().unlink("/" + _checked_name(name))

    def __repr__(self) -> str:
        return f"SharedMemoryStore({self._name!r}, mode={self._mode:#o})"

    def _open(self, rates: tuple[tuple[float, float, float], ...]) -> Segment:
        """The object mapped, created with rates or joined with the same rates."""
        from ._tokenbucket import SHM_EFOREIGN, SHM_EMISMATCH, SHM_ENOTREADY, SHM_OK

        segment_type, path = _segment_type(), "/" + self._name
        give_up = time.monotonic() + JOIN_WAIT
        created: tuple[tuple[float, float, float], ...] = ()
        while True:
            try:
                segment = segment_type(path, self._mode)
            except BlockingIOError:  # created, not sized yet
                status = SHM_ENOTREADY
            else:
                status = segment.create(rates) if segment.created else segment.join(rates)
                if status == SHM_OK:
                    return segment
                if status == SHM_EMISMATCH:
                    created = segment.created_rates()
                segment.close()
            if status != SHM_ENOTREADY or time.monotonic() > give_up:
                break
            time.sleep(0.001)
        if status == SHM_EMISMATCH:
            raise ValueError(f"{self!r} holds a limiter of rates {_describe(created)}, not {_describe(rates)}: "
                             f"every process must give it the same rates (or unlink it first)")
        if status == SHM_ENOTREADY:
            raise StoreCorrupt(f"{self!r} was created but never published within {JOIN_WAIT} s (its creator died "
                               f"while creating it?): remove it with SharedMemoryStore.unlink({self._name!r})")
        if status == SHM_EFOREIGN:
            raise StoreCorrupt(f"{self!r} names a shared-memory object that is not an aiotb limiter's, or a "
                               f"corrupt one: remove it with SharedMemoryStore.unlink({self._name!r}) if it is")
        raise ValueError(f"{self!r} cannot hold rates {_describe(rates)}")


def _checked_name(name: object) -> str:
    """A name for a shared-memory object, or TypeError/ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {name!r}")
    if not name or "/" in name or "\0" in name or len(name.encode()) > _NAME_BYTES:
        raise ValueError(f"name must be 1 to {_NAME_BYTES} bytes with no '/' or NUL, got {name!r}")
    return name


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
