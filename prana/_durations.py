"""Durations: seconds as a number, a ``timedelta``, or text such as ``"500ms"``, ``"2m"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from prana._errors import DurationError

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
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


def format_seconds(seconds: float) -> str:
    """Render seconds compactly for humans: ``0.5s``, ``2m``, ``1h30m``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds < 60:
        return f"{seconds:g}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{secs:g}s" if secs else f"{int(minutes)}m"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes)}m" if minutes else f"{int(hours)}h"
