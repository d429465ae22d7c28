"""The hot records' JSON: rows, and generated hooks that read and write them fast.

An execution holds a ``NodeExecution`` and at least one ``AttemptRecord`` per node run, so
their shape and the cost of their hooks decide what ``dumps``/``loads`` cost. ``ROWS`` are
written as arrays of field values (``register_rows``, used by every converter);
``register_hand_tuned`` adds generated hooks for ``HOT`` (the records an execution holds
by the hundred) that read strictly and fall back to the detailed converter on anything
unusual. ``prana._serialization`` builds the converter from these pieces.
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
from prana._model import (
    Activation,
    AttemptRecord,
    ErrorInfo,
    NodeExecution,
    RetryData,
    TimerData,
    WorkflowExecution,
    hot_record_problems,
    slot_twin,
)


class FieldError(ValueError):
    """A value that cannot be structured; its message is shown as is, after the path."""


def union_args(t: Any) -> tuple[Any, ...] | None:
    """The members of union ``t``, or ``None`` if it is not a union."""
    if typing.get_origin(t) in (Union, types.UnionType):
        return typing.get_args(t)
    return None


# -- hand-tuned hooks for the hot records -------------------------------------------------------

HOT: Final = (ErrorInfo, AttemptRecord, NodeExecution, Activation, WorkflowExecution)
"""Records an execution holds by the hundred (and the one that holds them): generated fast hooks.

``bench/bench_serialization.py`` measures them against cattrs' generic hooks (both write
rows): for 100 node runs they make ``loads`` about 3.5x and ``dumps`` about 4x faster.
What remains is mostly orjson (a quarter of it formatting datetimes) and building the
frozen instances (see ``prana._model.slot_twin``).
"""


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


def _runs_of(t: Any) -> Any:
    """``X`` if ``t`` is ``Mapping[str, tuple[X, ...]]`` with ``X`` an attrs class."""
    args = typing.get_args(t)
    if typing.get_origin(t) is Mapping and args[:1] == (str,):
        item = _tuple_of(args[1])
        if item is not None and attrs.has(item):
            return item
    return None


def gen_fast_hooks(
    conv: OrjsonConverter,
    cl: type[Any],
    special: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] | None = None,
) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """Generate an unstructure and a structure function for a plain attrs class.

    They write the same dicts as cattrs' generic hooks, but read strictly (exact JSON
    types, no extra keys) and build the instance through its slots without calling
    ``__init__``, which would cost more than everything else here: as its plain slotted
    twin given its real class at the end, when the layouts allow it (a plain slot store
    per field instead of a call of the frozen slot's descriptor; ``prana._model.slot_twin``),
    else through the descriptors. A field with a default
    may be missing (a record written before the field existed); any other shape raises,
    and the caller falls back to the detailed converter. ``special`` maps a field name to
    its own ``(write, read)`` functions (schema version 3's node runs).
    """
    twin = slot_twin(cl)
    names: dict[str, Any] = {
        "_new": object.__new__,
        "_cl": cl,
        "_twin": twin,
        "_Mismatch": Mismatch,
        "_missing": _MISSING,
    }
    fields = attrs.fields(cl)
    # ``n`` counts the keys read plus the defaulted ones missing: it equals the number of
    # fields exactly when ``d`` has no key that is not a field.
    made = "  o = _twin()" if twin is not None else "  o = _new(_cl)"
    load = [f"def structure_{cl.__name__}(d, _):", "  n = len(d)", made]
    dump = [f"def unstructure_{cl.__name__}(o):", "  return {"]
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
        if twin is not None:
            load.append(f"  o.{n} = v")
        else:
            names[f"_set_{n}"] = vars(cl)[n].__set__
            load.append(f"  _set_{n}(o, v)")
        dump.append(f"    {n!r}: {written},")
    load.append(f"  if n != {len(fields)}: raise _Mismatch")
    if twin is not None:
        load.append("  o.__class__ = _cl")
    load.append("  return o")
    dump.append("  }")
    source = "\n".join(load) + "\n\n" + "\n".join(dump) + "\n"
    generate(source, names, what=f"fast hooks {cl.__name__}")
    return names[f"unstructure_{cl.__name__}"], names[f"structure_{cl.__name__}"]


_MISSING: Final = object()
_SOURCES: Final = Mapping[str, tuple[Any, ...]]
"""``Activation.sources``' type: per input port, the source run's triple."""


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
    elif inner is None and t == _SOURCES:
        # An activation's sources: each a JSON array read as a tuple of its items, as
        # cattrs' tuple[Any, ...] hook reads it (anything but a dict of lists: cattrs').
        # One loop, no comprehension (each is a call of its own in 3.11).
        lines = [
            f"if {v}.__class__ is not dict: raise _Mismatch",
            f"if {v}:",
            "  w = {}",
            f"  for k, x in {v}.items():",
            "    if x.__class__ is not list: raise _Mismatch",
            "    w[k] = tuple(x)",
            f"  {v} = w",
        ]
        written = f"x if (x := o.{n}).__class__ is dict else dict(x)"
    elif inner is None and (item := _runs_of(t)) is not None:
        names[f"_h_{n}"] = conv.get_structure_hook(item)
        names[f"_u_{n}"] = conv.get_unstructure_hook(item)
        lines = [
            f"if {v}.__class__ is not dict: raise _Mismatch",
            (
                f"{v} = {{k: (_h_{n}(r[0], None),) if r.__class__ is list and len(r) == 1"
                f" else tuple([_h_{n}(x, None) for x in r]) for k, r in {v}.items()}}"
            ),
        ]
        written = (
            f"{{k: [_u_{n}(r[0])] if len(r) == 1 else [_u_{n}(x) for x in r]"
            f" for k, r in o.{n}.items()}}"
        )
    else:  # anything else: cattrs' own hooks for the whole type
        names[f"_t_{n}"] = t
        names[f"_h_{n}"] = conv.get_structure_hook(t)
        names[f"_u_{n}"] = conv.get_unstructure_hook(t)
        return [f"{v} = _h_{n}({v}, _t_{n})"], f"_u_{n}(o.{n})"
    if inner is not None and lines:
        lines = [f"if {v} is not None:", *(f"  {line}" for line in lines)]
    return lines, written


READ_HOT: Final = (RetryData, TimerData)
"""Hot records read by a generated fast hook and written by cattrs' (``RetryData`` leaves
``redrive`` out when it is false, an override the generated writer does not have;
``TimerData``, one datetime, is written as fast by cattrs')."""


def register_hand_tuned(conv: OrjsonConverter) -> None:
    """Register the generated fast hooks for the hot records (inner records first)."""
    for read in READ_HOT:
        if not hot_record_problems(read):
            conv.register_structure_hook(read, gen_fast_hooks(conv, read)[1])
    for cl in HOT:
        if hot_record_problems(cl):
            continue  # breaks a hot-record rule: cattrs' generic hooks (tests catch this)
        unstructure, structure = gen_fast_hooks(conv, cl)
        if cl in ROWS:
            unstructure, structure = gen_row_hooks(conv, cl, structure)
        conv.register_unstructure_hook(cl, unstructure)
        conv.register_structure_hook(cl, structure)


DATETIMES: Final[dict[str, datetime]] = {}
"""Timestamps already parsed, by their text; ``loads`` empties it before each document."""


def read_datetime(text: str) -> datetime:
    """Parse an aware ISO 8601 timestamp and remember it (the fast path's ``fromisoformat``)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        if not text.endswith("Z"):  # Python 3.10 reads no "Z" (version 3 writes it for UTC)
            raise
        value = datetime.fromisoformat(text[:-1] + "+00:00")
    if value.tzinfo is None:
        raise Mismatch
    if len(DATETIMES) >= 4096:  # a converter used directly, not through ``loads``
        DATETIMES.clear()
    DATETIMES[text] = value
    return value


# -- rows: the hot records as positional arrays -------------------------------------------------

ROWS: Final = (AttemptRecord, NodeExecution)
"""Records written as JSON arrays of their field values in ``attrs.fields`` order.

An execution holds one ``NodeExecution`` and at least one ``AttemptRecord`` per node run,
so their shape decides what ``dumps``/``loads`` cost: as arrays, a 100-node document is
half the size and reads about twice as fast (``bench/bench_serialization.py``). Trailing
fields equal to their default are left out (an attempt is usually
``[1, started_at, ended_at, "completed"]``). Readers also accept the object form that
schema version 1 wrote, and that a person may write by hand.
"""


def _row_layout(cl: type[Any]) -> tuple[tuple[str, ...], int, tuple[Any, ...]]:
    """``cl``'s field names, how many lead without a default, and each default as JSON."""
    fields = attrs.fields(cl)
    required = sum(1 for a in fields if a.default is attrs.NOTHING)
    if any(a.default is attrs.NOTHING for a in fields[required:]):
        raise TypeError(f"{cl.__name__}: fields without a default must come first in a row")
    defaults = tuple(
        None if a.default is attrs.NOTHING else _json_default(a.default) for a in fields
    )
    return tuple(a.name for a in fields), required, defaults


def _json_default(default: Any) -> Any:
    """A field default as the JSON value it is written as."""
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    if isinstance(default, enum.Enum):
        return default.value
    if isinstance(default, tuple):
        return list(default)
    return default


def _trim(row: list[Any], required: int, defaults: tuple[Any, ...]) -> list[Any]:
    """Drop the trailing items of ``row`` that equal their field's default."""
    end = len(row)
    while end > required:
        item = row[end - 1]
        if (item.value if isinstance(item, enum.Enum) else item) != defaults[end - 1]:
            break
        end -= 1
    del row[end:]
    return row


def register_rows(conv: OrjsonConverter) -> None:
    """Write ``ROWS`` records as arrays through cattrs' own hooks; read arrays or objects.

    An array item is matched to its field by position and becomes the object cattrs reads,
    so a bad item is reported by its field name; an array longer than the record is refused.
    """
    for cl in ROWS:
        names, required, defaults = _row_layout(cl)
        to_dict = conv.get_unstructure_hook(cl)
        from_dict = conv.get_structure_hook(cl)

        def unstructure(
            obj: Any,
            to_dict: Callable[[Any], Any] = to_dict,
            names: tuple[str, ...] = names,
            required: int = required,
            defaults: tuple[Any, ...] = defaults,
        ) -> list[Any]:
            data = to_dict(obj)
            return _trim([data[n] for n in names], required, defaults)

        def structure(
            value: Any,
            t: Any,
            cl: type[Any] = cl,
            names: tuple[str, ...] = names,
            from_dict: Callable[[Any, Any], Any] = from_dict,
        ) -> Any:
            if isinstance(value, list):
                if len(value) > len(names):
                    raise FieldError(
                        f"expected at most {len(names)} items for {cl.__name__} "
                        f"({', '.join(names)}), got {len(value)}"
                    )
                value = dict(zip(names, value, strict=False))
            return from_dict(value, t)

        conv.register_unstructure_hook(cl, unstructure)
        conv.register_structure_hook(cl, structure)


def gen_row_hooks(
    conv: OrjsonConverter, cl: type[Any], from_dict: Callable[[Any, Any], Any]
) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """Generate the fast row hooks for ``cl``: the same arrays ``register_rows`` writes.

    Reading is strict like ``gen_fast_hooks`` (an object goes to ``from_dict``, its object
    hook). The instance is built as a plain slotted twin and then given its real class when
    the layouts allow it (``prana._model.slot_twin``): assigning a slot of the frozen class costs a
    descriptor call per field, assigning the twin's is a plain store.
    """
    names, required, defaults = _row_layout(cl)
    width = len(names)
    twin = slot_twin(cl)
    ns: dict[str, Any] = {
        "_new": object.__new__,
        "_cl": cl,
        "_twin": twin,
        "_Mismatch": Mismatch,
        "_from_dict": from_dict,
        "_pad": defaults,
    }
    items = ", ".join(f"v{i}" for i in range(width))
    load = [
        f"def structure_row_{cl.__name__}(d, _):",
        "  if d.__class__ is not list: return _from_dict(d, _)",
        "  n = len(d)",
        f"  if n != {width}:",
        f"    if n < {required}: raise _Mismatch",
        "    d = [*d, *_pad[n:]]",
        f"  {items}, = d",
    ]
    written = []
    for i, a in enumerate(attrs.fields(cl)):
        lines, expr = field_code(conv, a.name, a.type, ns, f"v{i}")
        load += [f"  {line}" for line in lines]
        written.append(expr)
    if twin is not None:
        load.append("  o = _twin()")
        load += [f"  o.{n} = v{i}" for i, n in enumerate(names)]
        load.append("  o.__class__ = _cl")
    else:
        for n in names:
            ns[f"_set_{n}"] = vars(cl)[n].__set__
        load.append("  o = _new(_cl)")
        load += [f"  _set_{n}(o, v{i})" for i, n in enumerate(names)]
    load.append("  return o")
    dump = [f"def unstructure_row_{cl.__name__}(o):"]
    dump += [f"  w{i} = {expr}" for i, expr in enumerate(written)]
    for end in range(width, required, -1):
        default = defaults[end - 1]
        ns[f"_d{end - 1}"] = default
        differs = f"w{end - 1} is not None" if default is None else f"w{end - 1} != _d{end - 1}"
        dump.append(f"  if {differs}: return [{', '.join(f'w{i}' for i in range(end))}]")
    dump.append(f"  return [{', '.join(f'w{i}' for i in range(required))}]")
    source = "\n".join(load) + "\n\n" + "\n".join(dump) + "\n"
    generate(source, ns, what=f"row hooks {cl.__name__}")
    return ns[f"unstructure_row_{cl.__name__}"], ns[f"structure_row_{cl.__name__}"]
