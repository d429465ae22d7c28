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


CONTAINER_SIZE = 64
"""What one list or dict counts (``json_size``): about what it takes in memory once loaded.
Counted as one, a record of 151 MB of ``[[],[],...]`` was within the limits and took 4.5 GB
and 20 s to load."""
NUMBER_SIZE = 8
"""What one number counts: a loaded int or float takes 24-32 bytes (a character, one)."""


def json_size(value: Any, depth: int = 0) -> int:
    """The size of JSON-native, storable ``value``; ``-1`` if it is not (``json_problem``
    then says where and why).

    Size as prana counts what an execution keeps (``Limits``): the characters of every
    string (keys included), ``NUMBER_SIZE`` for each number, one for each bool, null, list
    item and dict entry, and ``CONTAINER_SIZE`` for each list and dict: within a few bytes
    per unit of what the value takes once loaded. One walk with no path text built, so
    checking an output costs less than ``json_problem`` did.
    """
    tp = type(value)
    if tp is str:
        return len(value) if value.isascii() or _SURROGATE.search(value) is None else -1
    if tp is int:
        return NUMBER_SIZE if MIN_INT <= value <= MAX_INT else -1
    if tp is float:
        return NUMBER_SIZE if math.isfinite(value) else -1
    if value is None or tp is bool:
        return 1
    if depth >= MAX_DEPTH:
        return -1
    total = 0
    if tp is dict:
        for k, v in value.items():
            if type(k) is not str or (not k.isascii() and _SURROGATE.search(k) is not None):
                return -1
            size = json_size(v, depth + 1)
            if size < 0:
                return -1
            total += len(k) + size + 1
        return total + CONTAINER_SIZE
    if tp is list:
        for v in value:
            size = json_size(v, depth + 1)
            if size < 0:
                return -1
            total += size + 1
        return total + CONTAINER_SIZE
    return -1


class ScopeView:
    """A root of the template scope computed as it is read (``$nodes``, ``$webhooks``): a
    template reads through it, and its value is never the view itself (refused where a value
    leaves a template: ``prana._template_limits.refuse_in_value``). Here, not there, so the
    scope defines its views without importing Jinja."""

    __slots__ = ()

    root = "$?"
    """How templates name it (``$nodes``)."""


_Memo = dict[int, tuple[Any, Any, int, int]]
"""``id(container) -> (container, its rendered form, size, height)``, for one walk."""


def shared_json(value: Any) -> tuple[Any, int]:
    """Rendered params made JSON data: datetimes (``{{ $now }}``) as ISO text, everything
    else shared, and the size (``json_size``'s; ``-1``: something is not JSON-native).

    Nothing is copied unless a datetime sits below it, and a value met again (a dozen
    params naming ``$input.main.big``) is walked once: the params cost what their
    templates built, not the data they name times the number of names. Each reference
    counts in the size, as it will in the record.
    """
    if type(value) is dict:
        # Rule: a dict of str keys and plain scalars (the usual rendered params) has no
        # datetime to convert and nothing shared, so it is its own rendered form and its
        # size is ``_shared``'s sum, counted here without the walk's memo. Anything else
        # (a container, a datetime, a subclass, a text json_size refuses) walks as before.
        total = 0
        for k, v in value.items():
            tp = type(v)
            if type(k) is not str or not k.isascii() or tp not in _FLAT:
                break
            size = len(v) if tp is str and v.isascii() else json_size(v)
            if size < 0:
                break
            total += len(k) + size + 1
        else:
            return value, total + CONTAINER_SIZE
    result, size, _ = _shared(value, {}, 0)
    return result, size


_FLAT = frozenset({str, int, float, bool, type(None)})


def _shared(value: Any, memo: _Memo, depth: int) -> tuple[Any, int, int]:
    """``(rendered form, size, height)`` of ``value`` at ``depth`` (see ``shared_json``)."""
    tp = type(value)
    if tp is not dict and tp is not list:
        if isinstance(value, datetime):
            text = value.isoformat()
            return text, len(text), 0
        return value, json_size(value), 0
    hit = memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1], (hit[2] if depth + hit[3] <= MAX_DEPTH else -1), hit[3]
    if depth >= MAX_DEPTH:
        return value, -1, 1
    total = 0
    height = 0
    result: Any = value
    if tp is dict:
        for k, v in value.items():
            new, size, below = _shared(v, memo, depth + 1)
            if type(k) is not str or size < 0 or json_size(k) < 0:
                total = -1
            elif total >= 0:
                total += len(k) + size + 1
            height = max(height, below)
            if new is not v:
                if result is value:
                    result = dict(value)  # the first change: copy once, then set
                result[k] = new
    else:
        for i, v in enumerate(value):
            new, size, below = _shared(v, memo, depth + 1)
            total = -1 if size < 0 or total < 0 else total + size + 1
            height = max(height, below)
            if new is not v:
                if result is value:
                    result = list(value)
                result[i] = new
    height += 1
    if total >= 0:
        total += CONTAINER_SIZE
    memo[id(value)] = (value, result, total, height)
    return result, total, height


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
