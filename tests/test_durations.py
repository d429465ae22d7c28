"""Time read and written one way: one formatter, one unit table, one aware-datetime check."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

import pytest

from prana import InvalidSettingsError, RetryPolicy
from prana._builtins import WAIT_UNITS
from prana._durations import SECONDS_PER_UNIT, format_duration, is_aware, to_seconds
from scheduling import _console
from scheduling.adapters._common import require_aware
from scheduling.stores._sql import check_aware


def test_the_console_and_the_policies_write_durations_with_one_formatter() -> None:
    """The console's formatter is the core's, so a policy and a timeline never disagree."""
    assert _console.format_duration is format_duration
    policy = RetryPolicy(initial_delay=2, max_delay=90, timeout=0.25, retry_timeout=7260)
    assert policy.describe() == (
        "exponential 2.0s x2, cap 1m30s, 3 attempts, budget 2h1m, timeout 250ms/attempt"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0ms"), (0.25, "250ms"), (2, "2.0s"), (59.9, "59.9s"), (90, "1m30s"), (7260, "2h1m")],
)
def test_durations_read_as_the_console_always_wrote_them(seconds: float, text: str) -> None:
    """The one formatter keeps the console's output: ``2.0s``, not ``2s``."""
    assert format_duration(seconds) == text


def test_every_unit_name_is_sized_by_the_one_table() -> None:
    """Duration text and ``wait.wait``'s unit names read their sizes from one table."""
    assert set(WAIT_UNITS.values()) == set(SECONDS_PER_UNIT.values())
    for text, unit in (("1ms", "ms"), ("1s", "s"), ("1sec", "s"), ("1min", "m"), ("1h", "h")):
        assert to_seconds(text) == SECONDS_PER_UNIT[unit]
    assert to_seconds("1d") == SECONDS_PER_UNIT["d"] == WAIT_UNITS["days"]
    assert vars(_console)["WAIT_UNITS"] is WAIT_UNITS  # the console reads timers with it


class _NoOffset(tzinfo):
    """A tzinfo that does not know its offset: the datetime is naive all the same."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


AWARE = datetime(2030, 1, 1, tzinfo=timezone.utc)
NAIVE = AWARE.replace(tzinfo=None)
NOT_AWARE = [NAIVE, AWARE.replace(tzinfo=_NoOffset()), "2030-01-01", None]


def test_one_aware_check_for_core_and_shell() -> None:
    """``is_aware`` decides, and the shell's checks refuse exactly what it refuses."""
    assert is_aware(AWARE)
    assert is_aware(AWARE.astimezone(timezone(timedelta(hours=5))))
    for value in NOT_AWARE:
        assert not is_aware(value)
        with pytest.raises(InvalidSettingsError):
            require_aware(value, "here")
        with pytest.raises(InvalidSettingsError):
            check_aware(value, "field")
    assert require_aware(AWARE, "here") is AWARE
    assert check_aware(AWARE, "field") is AWARE
