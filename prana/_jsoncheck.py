"""JSON checks: whether a value is JSON-native, and JSON-native copies of rendered params.

Node outputs, state updates, workflow input and resume data must be JSON-native (DESIGN §2)
so a reloaded execution resumes exactly as the in-memory one would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

JSON_SCALARS = (str, int, float, bool, type(None))


def json_problem(value: Any, path: str = "$") -> str | None:
    """Describe where ``value`` stops being JSON-native, or ``None`` if it is."""
    tp = type(value)
    if tp in JSON_SCALARS:
        if tp is float and not math.isfinite(value):
            return f"{path}: {value!r} is not a finite number"
        return None
    if tp is dict:
        for k, v in value.items():
            if type(k) is not str:
                return f"{path}: key {k!r} is a {type(k).__name__}, keys must be strings"
            problem = json_problem(v, f"{path}.{k}")
            if problem is not None:
                return problem
        return None
    if tp is tuple:
        return f"{path}: a tuple is not JSON-native (it reads back as a list); use a list"
    if tp is list:
        for i, v in enumerate(value):
            problem = json_problem(v, f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, bool | int | str) and not isinstance(value, type):
        return (
            f"{path}: {tp.__name__} is a subclass; convert it to a plain {tp.__mro__[-2].__name__}"
        )
    return (
        f"{path}: a {tp.__name__} is not JSON-native (use dicts, lists, str, numbers, bool, None)"
    )


def iso_datetimes(value: Any) -> Any:
    """Rendered params with datetimes (``{{ $now }}``) as ISO text, so they stay JSON data."""
    if isinstance(value, datetime):
        return value.isoformat()
    if type(value) is dict:
        if any(isinstance(v, datetime | dict | list) for v in value.values()):
            return {k: iso_datetimes(v) for k, v in value.items()}
        return value
    if type(value) is list:
        return [iso_datetimes(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    """A JSON-native copy of rendered params for the audit record (datetimes as ISO text)."""
    if type(value) in JSON_SCALARS:
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if attrs.has(type(value)):
        return jsonable(attrs.asdict(value))
    return repr(value)
