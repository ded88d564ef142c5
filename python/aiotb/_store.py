"""What every store's failures are: a limiter over a store that cannot answer, or whose answer
cannot be trusted, raises one of these and grants nothing."""

from __future__ import annotations


class StoreError(RuntimeError):
    """A store cannot serve the limiter: its state is unreachable or cannot be trusted."""


class StoreCorrupt(StoreError):
    """A store's state is not aiotb's, or is corrupt: nothing was granted from it."""


class StoreUnavailable(StoreError):
    """A store did not answer (down, restarting, too slow, the connection lost): nothing was granted
    from it. The cause is chained (``__cause__``)."""
