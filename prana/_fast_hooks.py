"""Generated readers and writers of an execution's stored body (``prana._compact``).

``field_code`` is each field's code, from its attrs type; ``gen_fast_hooks`` builds an
execution body's reader and writer from it, and ``prana._compact`` the node runs' rows.
They read strictly and raise on anything unusual, and ``loads`` then explains the record
with the detailed converter. Other records go through cattrs' own hooks: generated ones
for them saved under 3% on ``bench/bench_speed.py``'s roundtrip and sqlite rows.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Union

import attrs
from cattrs.preconf.orjson import OrjsonConverter

from prana._codegen import generate
from prana._model import slot_twin


class FieldError(ValueError):
    """A value that cannot be structured; its message is shown as is, after the path."""


def union_args(t: Any) -> tuple[Any, ...] | None:
    """The members of union ``t``, or ``None`` if it is not a union."""
    if typing.get_origin(t) in (Union, types.UnionType):
        return typing.get_args(t)
    return None


# -- generated hooks ---------------------------------------------------------------------------


class Mismatch(Exception):  # noqa: N818 - internal signal, never escapes loads()
    """The fast path met a shape it does not handle; the detailed converter takes over."""


def _optional_of(t: Any) -> Any:
    """``X`` if ``t`` is ``X | None``, else ``None``."""
    args = union_args(t)
    if args is not None and len(args) == 2 and type(None) in args:
        return next(a for a in args if a is not type(None))
    return None


def _tuple_of(t: Any) -> Any:
    """``X`` if ``t`` is ``tuple[X, ...]``, else ``None``."""
    args = typing.get_args(t)
    if typing.get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def gen_fast_hooks(
    conv: OrjsonConverter,
    cl: type[Any],
    special: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] | None = None,
    omit_empty: frozenset[str] = frozenset(),
) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """Generate an unstructure and a structure function for a plain attrs class.

    They write the same dicts as cattrs' generic hooks, but read strictly (exact JSON
    types, no extra keys) and build the instance through its slots without calling
    ``__init__``, which would cost more than everything else here: as its plain slotted
    twin given its real class at the end (a plain slot store per field instead of a call
    of the frozen slot's descriptor; ``prana._model.slot_twin``: a class without a twin
    is refused). A field with a default may be left out (as cattrs' own
    hooks allow); any other shape raises, and the caller falls back to the detailed
    converter. ``special`` maps a field name to its own ``(write, read)`` functions (the
    node runs); a field named in ``omit_empty`` (defaulting to an empty value) is written
    only when it is not empty. ``bench/bench_speed.py``'s roundtrip row: an execution body read and
    written by cattrs' generic hooks instead took 1.14x the time (0.88x with these).
    """
    twin = slot_twin(cl)
    if twin is None:  # it breaks a hot-record rule (prana._model)
        raise TypeError(f"{cl.__name__} has no slot twin (see prana._model.slot_twin)")
    names: dict[str, Any] = {
        "_cl": cl,
        "_twin": twin,
        "_Mismatch": Mismatch,
        "_missing": _MISSING,
    }
    fields = attrs.fields(cl)
    # ``n`` counts the keys read plus the defaulted ones missing: it equals the number of
    # fields exactly when ``d`` has no key that is not a field.
    load = [f"def structure_{cl.__name__}(d, _):", "  n = len(d)", "  o = _twin()"]
    dump = [f"def unstructure_{cl.__name__}(o):", "  d = {"]
    tail: list[str] = []
    for a in fields:
        n = a.name
        if special and n in special:
            names[f"_w_{n}"], names[f"_r_{n}"] = special[n]
            lines, written = [f"v = _r_{n}(v)"], f"_w_{n}(o.{n})"
        else:
            lines, written = field_code(conv, n, a.type, names)
        if a.default is attrs.NOTHING:
            load += [f"  v = d[{n!r}]", *(f"  {line}" for line in lines)]
        else:
            if isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
                names[f"_default_{n}"] = a.default.factory
                default = f"_default_{n}()"
            else:
                names[f"_default_{n}"] = a.default
                default = f"_default_{n}"
            load += [
                f"  v = d.get({n!r}, _missing)",
                "  if v is _missing:",
                f"    v = {default}",
                "    n += 1",
                *(["  else:", *(f"    {line}" for line in lines)] if lines else []),
            ]
        load.append(f"  o.{n} = v")
        if n in omit_empty:
            tail += [f"  if o.{n}:", f"    d[{n!r}] = {written}"]
        else:
            dump.append(f"    {n!r}: {written},")
    load += [f"  if n != {len(fields)}: raise _Mismatch", "  o.__class__ = _cl", "  return o"]
    dump += ["  }", *tail, "  return d"]
    source = "\n".join(load) + "\n\n" + "\n".join(dump) + "\n"
    generate(source, names, what=f"fast hooks {cl.__name__}")
    return names[f"unstructure_{cl.__name__}"], names[f"structure_{cl.__name__}"]


_MISSING: Final = object()


def field_code(
    conv: OrjsonConverter, n: str, t: Any, names: dict[str, Any], v: str = "v"
) -> tuple[list[str], str]:
    """Code for field ``n`` of type ``t``: lines turning local ``v`` (its JSON value) into
    the field value, and the expression that writes the field of instance ``o``."""
    inner = _optional_of(t)
    base = t if inner is None else inner
    lines: list[str]
    written = f"o.{n}"
    if base in (str, int, bool):
        lines = [f"if {v}.__class__ is not {base.__name__}: raise _Mismatch"]
    elif base is float:
        lines = [
            f"if {v}.__class__ is int: {v} = float({v})",
            f"elif {v}.__class__ is not float: raise _Mismatch",
        ]
    elif base is datetime:
        # One document repeats each timestamp (a run ends when the next starts): parse once.
        names["_datetimes"] = DATETIMES
        names["read_datetime"] = read_datetime
        lines = [f"w = _datetimes.get({v})", f"{v} = read_datetime({v}) if w is None else w"]
    elif base is Any:
        lines = []
    elif isinstance(base, type) and issubclass(base, enum.Enum):
        names[f"_enum_{n}"] = {m.value: m for m in base}
        lines = [f"{v} = _enum_{n}[{v}]"]
        # ``_value_`` is a plain attribute; ``.value`` (which orjson reads) is a slow property.
        written = (
            f"o.{n}._value_" if inner is None else f"None if (x := o.{n}) is None else x._value_"
        )
    elif attrs.has(base):
        names[f"_h_{n}"] = conv.get_structure_hook(base)
        names[f"_u_{n}"] = conv.get_unstructure_hook(base)
        lines = [f"{v} = _h_{n}({v}, None)"]
        written = f"None if (x := o.{n}) is None else _u_{n}(x)"
    elif inner is None and typing.get_origin(t) is Mapping and typing.get_args(t) == (str, Any):
        lines = [f"if {v}.__class__ is not dict: raise _Mismatch"]
        written = f"x if (x := o.{n}).__class__ is dict else dict(x)"
    elif inner is None and (item := _tuple_of(t)) is not None and attrs.has(item):
        names[f"_h_{n}"] = conv.get_structure_hook(item)
        names[f"_u_{n}"] = conv.get_unstructure_hook(item)
        # Most runs have one attempt: skip the comprehension (a call of its own in 3.11).
        lines = [
            f"if {v}.__class__ is not list: raise _Mismatch",
            (
                f"{v} = (_h_{n}({v}[0], None),) if len({v}) == 1"
                f" else tuple([_h_{n}(x, None) for x in {v}])"
            ),
        ]
        written = f"[_u_{n}(x[0])] if len(x := o.{n}) == 1 else [_u_{n}(y) for y in x]"
    else:  # anything else: cattrs' own hooks for the whole type
        names[f"_t_{n}"] = t
        names[f"_h_{n}"] = conv.get_structure_hook(t)
        names[f"_u_{n}"] = conv.get_unstructure_hook(t)
        return [f"{v} = _h_{n}({v}, _t_{n})"], f"_u_{n}(o.{n})"
    if inner is not None and lines:
        lines = [f"if {v} is not None:", *(f"  {line}" for line in lines)]
    return lines, written


DATETIMES: Final[dict[str, datetime]] = {}
"""Timestamps already parsed, by their text; ``loads`` empties it before each document."""


def read_datetime(text: str) -> datetime:
    """Parse an aware ISO 8601 timestamp and remember it (the fast path's ``fromisoformat``)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        if not text.endswith("Z"):  # Python 3.10 reads no "Z" (dumps writes it for UTC)
            raise
        value = datetime.fromisoformat(text[:-1] + "+00:00")
    if value.tzinfo is None:
        raise Mismatch
    if len(DATETIMES) >= 4096:  # a converter used directly, not through ``loads``
        DATETIMES.clear()
    DATETIMES[text] = value
    return value
