"""Test doubles for users' own tests: a clock moved by hand, and switches that zero delays."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prana._config import is_testing, set_testing
from prana._durations import is_aware
from prana._entry import AWARE_CLOCKS, plain_datetime
from prana._errors import InvalidSettingsError

__all__ = ["ManualClock", "is_testing", "set_testing"]


class ManualClock:
    """A clock that only moves when told to: ``clock()`` is now, ``advance(seconds)`` moves it.

    Pass it as ``clock=`` to the executor, the runner and ``ManualScheduler`` so that all
    three share one notion of now and tests never sleep.
    ``start`` defaults to 2030-01-01 00:00 UTC and must be aware. Every reading is an aware,
    plain ``datetime`` (a subclass given, as pendulum's, is kept as a plain one), so the core
    need not check each reading as it does other clocks'.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2030, 1, 1, tzinfo=timezone.utc)
        if not is_aware(start):
            raise InvalidSettingsError(
                f"ManualClock(start={start!r}): use an aware datetime, e.g. "
                "datetime(2030, 1, 1, tzinfo=timezone.utc)"
            )
        self._now = start if type(start) is datetime else plain_datetime(start)

    def __call__(self) -> datetime:
        return self._now

    def now(self) -> datetime:
        """The current time (the same as calling the clock)."""
        return self._now

    def advance(self, seconds: float | timedelta) -> datetime:
        """Move the clock forward and return the new now; it never moves backwards."""
        if isinstance(seconds, timedelta):
            delta = seconds
        elif isinstance(seconds, int | float) and not isinstance(seconds, bool):
            if seconds != seconds or seconds in (float("inf"), float("-inf")):
                raise InvalidSettingsError(
                    f"ManualClock.advance({seconds!r}): give a finite number of seconds"
                )
            delta = timedelta(seconds=seconds)
        else:
            raise InvalidSettingsError(
                f"ManualClock.advance({seconds!r}): give seconds (a number) or a timedelta"
            )
        if delta < timedelta(0):
            raise InvalidSettingsError(f"ManualClock.advance({seconds!r}): cannot go backwards")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (not earlier than now)."""
        if not is_aware(when):
            raise InvalidSettingsError(
                f"ManualClock.set({when!r}): use an aware datetime, e.g. with tzinfo=timezone.utc"
            )
        if when < self._now:
            raise InvalidSettingsError(f"ManualClock.set({when!r}): cannot go backwards")
        self._now = when if type(when) is datetime else plain_datetime(when)


AWARE_CLOCKS.add(
    ManualClock
)  # its readings: aware by its checks, plain as kept, moved by timedelta
