"""Test doubles for users' own tests: a clock moved by hand, and switches that zero delays."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from prana._errors import InvalidSettingsError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["ManualClock", "is_testing", "set_testing"]


class ManualClock:
    """A clock that only moves when told to: ``clock()`` is now, ``advance(seconds)`` moves it.

    Pass it as ``clock=`` to the executor, the runner and ``ManualScheduler`` so that all
    three share one notion of now and tests never sleep.
    ``start`` defaults to 2030-01-01 00:00 UTC and must be aware.
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
        if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
            raise InvalidSettingsError(
                f"ManualClock.set({when!r}): use an aware datetime, e.g. with tzinfo=timezone.utc"
            )
        if when < self._now:
            raise InvalidSettingsError(f"ManualClock.set({when!r}): cannot go backwards")
        self._now = when


_TESTING: tuple[bool, int | None] = (False, None)


def _testing_state() -> tuple[bool, int | None]:
    """The testing switch as (on, attempt cap); read by the retry policy on every decision."""
    return _TESTING


def is_testing() -> bool:
    """Whether ``set_testing`` is on: every retry delay is 0."""
    return _TESTING[0]


class _TestingRestore:
    """Returned by ``set_testing``: leaving its ``with`` block restores the previous state."""

    def __init__(self, previous: tuple[bool, int | None]) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _TESTING  # one process-wide switch, by design
        _TESTING = self._previous


def set_testing(on: bool = True, *, attempts: int | None = None) -> _TestingRestore:
    """Switch testing mode on or off for the whole process (like stamina's ``set_testing``).

    When on, every computed retry delay is 0 (so retries resume at once with a manual
    clock) and, with ``attempts``, no policy allows more than that many attempts. The
    switch takes effect immediately; used as a context manager
    (``with set_testing(True, attempts=2):``) it restores the previous state on exit.
    """
    global _TESTING  # one process-wide switch, by design
    if not isinstance(on, bool):
        raise InvalidSettingsError(f"set_testing(on={on!r}): use True or False")
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
    ):
        raise InvalidSettingsError(
            f"set_testing(attempts={attempts!r}): use a whole number >= 1 (the first try "
            "included), or None for the policies' own limits"
        )
    previous = _TESTING
    _TESTING = (on, attempts if on else None)
    return _TestingRestore(previous)
