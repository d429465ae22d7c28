"""JSON checks: whether a value is JSON-native, and JSON-native copies of rendered params.

Node outputs, state updates, workflow input and resume data must be JSON-native so a
reloaded execution resumes exactly as the in-memory one would, and storable: what passes
here is what the record's serializer writes, so nothing runs and then fails to save.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

JSON_SCALARS = (str, int, float, bool, type(None))

MAX_DEPTH = 200
"""How deeply lists and dicts may nest in data an execution keeps.

The record nests that data a few levels down and its serializer stops at 254 levels, so
deeper data would let actions run and then fail to save (and a webhook token that failed
to save stays valid, so its caller could run those actions again)."""

MIN_INT = -(2**63)
MAX_INT = 2**64 - 1
"""The integers the record's serializer (orjson) writes; bigger ones belong in a string."""

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _str_problem(text: str, path: str) -> str | None:
    if text.isascii() or _SURROGATE.search(text) is None:
        return None
    return f"{path}: the string holds a lone surrogate, which is not valid UTF-8"


def json_problem(value: Any, path: str = "$", depth: int = 0) -> str | None:
    """Describe where ``value`` stops being JSON-native and storable, or ``None`` if it is.

    ``depth`` is how many lists and dicts enclose ``value`` (for the recursion).
    """
    tp = type(value)
    if tp is str:
        return _str_problem(value, path)
    if tp is int:
        if MIN_INT <= value <= MAX_INT:
            return None
        return (
            f"{path}: an integer of {value.bit_length()} bits is outside the range a record "
            "holds (-2**63 to 2**64 - 1); send it as a string"
        )
    if tp in JSON_SCALARS:
        if tp is float and not math.isfinite(value):
            return f"{path}: {value!r} is not a finite number"
        return None
    if (tp is dict or tp is list) and depth >= MAX_DEPTH:
        where = path if len(path) <= 60 else path[:59] + "…"
        return f"{where}: nested deeper than {MAX_DEPTH} levels of lists and dicts; flatten it"
    if tp is dict:
        for k, v in value.items():
            if type(k) is not str:
                return f"{path}: key {k!r} is a {type(k).__name__}, keys must be strings"
            problem = _str_problem(k, path) or json_problem(v, f"{path}.{k}", depth + 1)
            if problem is not None:
                return problem
        return None
    if tp is tuple:
        return f"{path}: a tuple is not JSON-native (it reads back as a list); use a list"
    if tp is list:
        for i, v in enumerate(value):
            problem = json_problem(v, f"{path}[{i}]", depth + 1)
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
