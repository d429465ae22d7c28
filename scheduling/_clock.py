"""The store's clock: the time of the database server, kept by this process between reads.

Theory of operation. Leases, claims and due times are compared across processes: a lease
one worker writes is judged expired by another, a retry one process schedules is fired by
another. If each process read its own wall clock, a process 2 minutes behind would write
leases the others see as long expired (its live attempt taken over and run twice), and one
ahead would fire every timer early. So every process of a deployment on PostgreSQL reads
one clock, the server's: ``StoreClock`` reads it (``SELECT clock_timestamp()``) now and
then, and in between adds this process's monotonic clock to the last reading. The wall
clock of the process is not used at all, so it may be off by any amount; what remains is
the error of a reading (half its round trip, at most ``MAX_ROUND_TRIP_SECONDS / 2``) and
the drift of the monotonic clock since the last one (a few ms over ``RESYNC_SECONDS``).

A process whose wall clock disagrees with the server's by more than
``WARN_BEYOND_SECONDS`` is told once (WARNING, with the offset measured): nothing breaks,
but its logs and anything else reading the wall clock are off.

The core stays pure: this is only the clock the shell injects (``Runner`` uses the store's
when it is given none); the executor reads whatever clock it is handed.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_ROUND_TRIP_SECONDS", "RESYNC_SECONDS", "WARN_BEYOND_SECONDS", "StoreClock"]

logger = logging.getLogger("scheduling.clock")

RESYNC_SECONDS = 30.0
"""How often the server's time is read again (the monotonic clock carries it in between)."""
RETRY_SECONDS = 1.0
"""How soon a reading that failed (the server away, a slow round trip) is tried again."""
MAX_ROUND_TRIP_SECONDS = 0.5
"""A reading whose round trip took longer is not trusted (once one reading was made)."""
WARN_BEYOND_SECONDS = 1.0
"""A wall clock further than this from the server's is logged (once per process clock)."""

_UTC = timezone.utc


class StoreClock:
    """A clock (a callable returning an aware UTC ``datetime``) that follows a server's time.

    ``read`` returns the server's time now, or ``None`` when it cannot say (the store is not
    open yet, or the server is away; it raises nothing): until a first reading succeeds,
    the clock is this process's wall clock; after, a failed reading keeps the last one.
    ``where`` names the server in the warning.
    """

    def __init__(self, read: Callable[[], datetime | None], *, where: str) -> None:
        self._read = read
        self.where = where
        self._base: float | None = None
        """Server time (POSIX seconds) minus ``time.monotonic()`` at the last reading."""
        self._next = 0.0
        self._reading = threading.Lock()
        self.offset_seconds: float | None = None
        """This process's wall clock minus the server's, at the last reading."""
        self._warned = False

    def __repr__(self) -> str:
        return f"StoreClock(where={self.where!r})"

    def __call__(self) -> datetime:
        now = time.monotonic()
        if now >= self._next and self._reading.acquire(blocking=False):
            try:
                self.sync()
            finally:
                self._reading.release()
        base = self._base
        if base is None:
            return datetime.now(_UTC)
        return datetime.fromtimestamp(base + time.monotonic(), _UTC)

    def sync(self) -> bool:
        """Read the server's time now; whether the reading was taken."""
        before = time.monotonic()
        server = self._read()
        after = time.monotonic()
        wall = time.time()
        trip = after - before
        if server is None or (self._base is not None and trip > MAX_ROUND_TRIP_SECONDS):
            self._next = after + RETRY_SECONDS
            return False
        middle = (before + after) / 2
        server_seconds = server.timestamp()
        self._base = server_seconds - middle
        self._next = after + RESYNC_SECONDS
        offset = wall - (server_seconds + (after - middle))
        self.offset_seconds = offset
        if abs(offset) > WARN_BEYOND_SECONDS and not self._warned:
            self._warned = True
            logger.warning(
                "this process's clock is %+.1f s off the clock of %s; prana takes the time "
                "of leases, claims and due times from %s, so nothing runs early or twice, "
                "but set this machine's clock right (NTP): its logs and other programs "
                "read it",
                offset,
                self.where,
                self.where,
            )
        return True
