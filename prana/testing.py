"""Test doubles for users' own tests: a clock moved by hand, and switches that zero delays."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prana._errors import InvalidSettingsError

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that only moves when told to: ``clock()`` is now, ``advance(seconds)`` moves it.

    Pass it as ``clock=`` to the executor, the runner and ``ManualScheduler`` so that all
    three share one notion of now and tests never sleep.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2030, 1, 1, tzinfo=timezone.utc)
        if start.tzinfo is None or start.utcoffset() is None:
            raise InvalidSettingsError(
                f"ManualClock(start={start!r}): use an aware datetime, e.g. "
                "datetime(2030, 1, 1, tzinfo=timezone.utc)"
            )
        self._now = start

    def __call__(self) -> datetime:
        return self._now

    def now(self) -> datetime:
        """The current time (the same as calling the clock)."""
        return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move the clock forward and return the new now; it never moves backwards."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        if delta < timedelta(0):
            raise InvalidSettingsError(f"ManualClock.advance({seconds!r}): cannot go backwards")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (not earlier than now)."""
        if when < self._now:
            raise InvalidSettingsError(f"ManualClock.set({when!r}): cannot go backwards")
        self._now = when
