"""Time, read and written one way: durations, their units, their text, and aware instants.

A duration is seconds as a number, a ``timedelta``, or text such as ``"500ms"``, ``"2m"``
(``to_seconds``); ``format_duration`` writes one back for people. ``SECONDS_PER_UNIT`` is
the one unit table (the text suffixes, ``wait.wait``'s unit names and the formatter all
read it), and ``is_aware`` the one check that a datetime carries its UTC offset.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import TypeGuard

from prana._errors import DurationError

SECONDS_PER_UNIT: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""The one unit table: how many seconds each unit is."""

MINUTE, HOUR, DAY = SECONDS_PER_UNIT["m"], SECONDS_PER_UNIT["h"], SECONDS_PER_UNIT["d"]

_UNITS = {
    **SECONDS_PER_UNIT,
    "sec": SECONDS_PER_UNIT["s"],
    "min": SECONDS_PER_UNIT["m"],
}
"""The suffixes duration text may use (``"30s"``, ``"2min"``), by their size in seconds."""
_TEXT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|sec|min|s|m|h|d)?\s*$")

Duration = float | int | timedelta | str


def to_seconds(value: object, *, field: str = "duration") -> float:
    """Read a duration as seconds, raising ``DurationError`` naming ``field`` when it can't."""
    if isinstance(value, bool):
        raise DurationError(f"{field}: expected a duration, got a bool ({value!r})")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _TEXT.match(value)
        if match is None:
            raise DurationError(
                f"{field}: cannot read {value!r} as a duration; "
                'use seconds (30), or text such as "500ms", "30s", "2m", "1h", "1d"'
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise DurationError(
            f"{field}: expected seconds, a timedelta or text like '30s', got {type(value).__name__}"
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise DurationError(f"{field}: must be a finite, non-negative duration, got {value!r}")
    return seconds


def optional_seconds(value: object, *, field: str) -> float | None:
    """Like ``to_seconds`` but lets ``None`` through (an unset limit)."""
    return None if value is None else to_seconds(value, field=field)


def format_duration(seconds: float) -> str:
    """Seconds as short text: ``0.25`` is ``250ms``, ``2`` is ``2.0s``, ``90`` is ``1m30s``.

    The one formatter for durations people read: the console's timelines, the policies'
    ``describe()`` and schedules, and lint messages all write durations through it.
    """
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f}ms"
    if seconds < MINUTE:
        return f"{sign}{seconds:.1f}s"
    if seconds < HOUR:
        minutes, rest = divmod(round(seconds), int(MINUTE))
        return f"{sign}{minutes}m{rest}s"
    hours, rest = divmod(round(seconds), int(HOUR))
    return f"{sign}{hours}h{rest // int(MINUTE)}m"


def is_aware(value: object) -> TypeGuard[datetime]:
    """Whether ``value`` is a datetime that knows its UTC offset (records hold no other)."""
    return isinstance(value, datetime) and value.utcoffset() is not None
