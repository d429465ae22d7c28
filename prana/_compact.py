"""The stored node runs: compact rows, their times as microseconds after the run's start.

An execution stores a ``NodeExecution`` and at least one ``AttemptRecord`` per node run, so
their layout decides the size of a record and most of what ``dumps``/``loads`` cost.
The rows (``RUN_LAYOUT``, ``ATTEMPT_LAYOUT``) keep every field, and so the whole
per-attempt audit trail, in little space:

- a run's row has no ``node_key``: the key it is stored under in ``node_executions`` is it;
- the run's ``started_at`` is its anchor, written as ISO text; every other time of the run
  and of its attempts (``completed_at``, ``started_at``, ``ended_at``, ``due_at``) is an
  integer, the whole microseconds after the anchor, when both are UTC. A time in another
  offset (or an anchor that is not UTC) is written as ISO text as before, so what reads
  back is exactly what was written, offset included;
- a run filed under a key other than its own ``node_key`` (never built by the engine) is
  written as an object of its fields instead, so it keeps its key;
- fields are ordered so the usual values trail and are left out: ``RUN_LAYOUT``'s and
  ``ATTEMPT_LAYOUT``'s defaults (an attempt ``completed``, a run's port ``main``) are
  the common values, not the records' own defaults.

The fast path (``gen_runs_codec``) reads strictly and raises on anything unusual; then
``named_runs`` rewrites the rows as objects of named fields with ISO times, so the detailed
converter names each bad field as it does for any other record.

Validate eagerly, build lazily. The fast path checks every row when the record is read and
builds none (``prana._noderuns.NodeRuns`` builds a node's runs when first read). The rule
the check (``RunsCodec.check``, ``_check_code``) enforces is the reader's, field by field:
a run row is a list of 4 to 10 items, an attempt row a list of 2 to 8; ``status`` and
``outcome`` are values of their enums; ``execution_index``, ``run_index``, ``number`` and
``retry_delay_ms`` (or ``None``) are ``int`` (not ``bool``); ``redrive`` is a ``bool``;
``output_port`` is text or ``None``; an ``error`` is ``None`` or an ``ErrorInfo`` object
(checked by its own reader); ``attempts`` is a list; the run's ``started_at`` is aware ISO
text; each other time is ``None`` where optional, aware ISO text, or a whole number of
microseconds when the anchor is UTC and the anchor plus that many microseconds is a
datetime (years 1 to 9999); ``output`` and ``params`` are any JSON. A row the check takes
therefore builds without error, equal to what the records' constructors build from it;
``tests/test_node_runs.py`` holds the check, the builder and the constructors (the
detailed converter, through ``__init__``) to that over generated mutations of stored rows,
so a rule added to a constructor and not to the check fails there.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Final, NamedTuple

import attrs
import orjson
from cattrs.preconf.orjson import OrjsonConverter

from prana._codegen import generate
from prana._fast_hooks import DATETIMES, Mismatch, field_code, gen_fast_hooks, read_datetime
from prana._model import (
    AttemptOutcome,
    AttemptRecord,
    NodeExecution,
    NodeStatus,
    StoredRow,
    WorkflowExecution,
    slot_twin,
)
from prana._noderuns import NOT_DELIVERED, NodeRuns

RUN_LAYOUT: Final[tuple[tuple[str, Any], ...]] = (
    ("status", attrs.NOTHING),
    ("execution_index", attrs.NOTHING),
    ("run_index", attrs.NOTHING),
    ("started_at", attrs.NOTHING),
    ("completed_at", None),
    ("attempts", ()),
    ("output", None),
    ("params", None),
    ("output_port", "main"),
    ("error", None),
)
"""A run row: ``NodeExecution``'s fields but ``node_key``, in this order, each
with the value a row leaves out when it trails (``attrs.NOTHING``: always written).

Stored layout: never reorder; a new field goes at the end with its default."""

ATTEMPT_LAYOUT: Final[tuple[tuple[str, Any], ...]] = (
    ("number", attrs.NOTHING),
    ("started_at", attrs.NOTHING),
    ("ended_at", None),
    ("outcome", AttemptOutcome.COMPLETED),
    ("error", None),
    ("due_at", None),
    ("retry_delay_ms", None),
    ("redrive", False),
)
"""An attempt row: ``AttemptRecord``'s fields in this order (as ``RUN_LAYOUT``)."""

_UTC: Final = timezone.utc
_US: Final = timedelta(microseconds=1)
_USUAL: Final = {NodeExecution: 8, AttemptRecord: 3}
"""The commonest row lengths, tried first: a completed run with its output and params, and
a completed attempt (then the longer ones, which carry an error)."""
_YEAR: Final = 365 * 86_400_000_000
"""A year of microseconds: from any time in years 2 to 9998, a time within it is a datetime."""
_FIRST: Final = datetime.min.replace(tzinfo=_UTC)
_LAST: Final = datetime.max.replace(tzinfo=_UTC)


class _NotInt:
    """A class no JSON value has (the check's stand-in for ``int`` after a non-UTC anchor)."""


def _iso(value: datetime) -> str:
    """``value`` as the text ``dumps`` writes it (orjson's, ``Z`` for UTC)."""
    return orjson.dumps(value, option=orjson.OPT_UTC_Z)[1:-1].decode()


def _bounds(anchor: datetime) -> tuple[int, int]:
    """The whole microseconds ``n`` for which ``anchor + n`` microseconds is a datetime."""
    return (_FIRST - anchor) // _US, (_LAST - anchor) // _US


def check_layouts() -> None:
    """Refuse a layout that does not hold every field of its record exactly once."""
    for cl, layout, skipped in (
        (NodeExecution, RUN_LAYOUT, {"node_key"}),
        (AttemptRecord, ATTEMPT_LAYOUT, set()),
    ):
        names = [name for name, _ in layout]
        fields = {a.name for a in attrs.fields(cl)} - skipped
        if len(set(names)) != len(names) or set(names) != fields:
            raise TypeError(
                f"prana._compact: the stored layout of {cl.__name__} must list each of its "
                f"fields once (missing: {sorted(fields - set(names))}, unknown: "
                f"{sorted(set(names) - fields)}); add a new field at the end of the layout"
            )
        required = [d is attrs.NOTHING for _, d in layout]
        if required != sorted(required, reverse=True):
            raise TypeError(f"{cl.__name__}: fields always written must lead the layout")


def _after(name: str, optional: bool = False) -> tuple[list[str], str, list[str]]:
    """Reading, writing and checking a time stored after the anchor ``a`` (local ``au``: UTC).

    The check (``check_run``) accepts exactly what the reading turns into a datetime: a
    whole number when the anchor is UTC and ``a`` plus that many microseconds is a
    datetime (``lo``/``hi``: its bounds for this anchor, worked out only for a time not
    plainly inside them), or aware ISO text.
    """
    read = [
        f"if {name}.__class__ is int:",
        "  if not au: raise _Mismatch",
        f"  {name} = a if {name} == 0 else a + _delta(0, 0, {name})",
        "else:",
        f"  w = _datetimes.get({name})",
        f"  {name} = _read_datetime({name}) if w is None else w",
    ]
    check = [
        # ``ti`` is ``int`` after a UTC anchor, else a class no value has: a count after
        # another anchor goes on to the text check, which refuses it as the reader does.
        f"if {name}.__class__ is ti:",
        # Under a year from an anchor in years 2 to 9998 is always a datetime: the exact
        # bounds (two subtractions and divisions) only for the rest.
        f"  if {name} and not (-_YEAR < {name} < _YEAR and 1 < a.year < 9999):",
        "    lo, hi = _bounds(a)",
        f"    if not lo <= {name} <= hi: raise _Mismatch",
        # A count first (the usual value), then ``None`` where the time is optional.
        f"elif {f'{name} is not None and ' if optional else ''}{name} not in _datetimes:",
        f"  _read_datetime({name})",
    ]
    # Identity first: the engine stamps a run and its attempt with one clock reading.
    write = (
        "(0 if x is a else (x - a) // _US) if au and x.__class__ is _datetime"
        " and x.tzinfo is _UTC else x"
    )
    return read, write, check


def _gen_row(
    conv: OrjsonConverter,
    cl: type[Any],
    layout: tuple[tuple[str, Any], ...],
    ns: dict[str, Any],
) -> None:
    """Generate ``read_<cl>`` and ``write_<cl>`` for one row layout into ``ns``.

    A run's functions take its node key and define the anchor; an attempt's take the
    anchor ``a`` and ``au`` (whether the anchor is UTC) from its run. ``_check_code``
    generates the check of the same rows from the same per-field code.
    """
    types = {a.name: a.type for a in attrs.fields(cl)}
    width = len(layout)
    required = sum(1 for _, d in layout if d is attrs.NOTHING)
    is_run = cl is NodeExecution
    pad = tuple(None if d is attrs.NOTHING else _json(d) for _, d in layout)
    ns[f"_pad_{cl.__name__}"] = pad
    ns[f"_value_{cl.__name__}"] = tuple(None if d is attrs.NOTHING else d for _, d in layout)
    ns[f"_enum_{cl.__name__}"] = {m.value: m for m in (NodeStatus if is_run else AttemptOutcome)}
    head = "def read_run(k, d):" if is_run else "def read_attempt(d, a, au):"
    load = [
        head,
        # A run under another node's key is an object (see ``write_run``).
        "  if d.__class__ is not list:"
        + (" return _h_object(d, None)" if is_run else " raise _Mismatch"),
        "  n = len(d)",
    ]
    dump = ["def write_run(k, o):" if is_run else "def write_attempt(o, a, au):"]
    if is_run:
        # A run filed under another node's key (never built by the engine) keeps its key
        # as an object of its fields.
        dump.append("  if o.node_key is not k and o.node_key != k: return _as_object(o)")
        # The row remembered for this very record (``prana._model.StoredRow``).
        dump.append("  r = _getattr(o, '_row', None)")
        dump.append("  if r is not None: return r")
    per_field: list[list[str]] = []
    for i, (name, _) in enumerate(layout):
        fl: list[str] = []
        per_field.append(fl)
        v = f"v{i}"
        t = types[name]
        if name == "started_at" and is_run:
            anchor = [
                f"  a = _datetimes.get({v})",
                f"  if a is None: a = _read_datetime({v})",
                "  au = a.tzinfo is _UTC",
            ]
            fl += [*anchor, f"  {v} = a"]
            dump += ["  a = o.started_at", "  au = a.__class__ is _datetime and a.tzinfo is _UTC"]
            # The anchor is remembered (``_row``) as its text: written again at every save.
            dump.append(f"  w{i} = _iso(a) if a.__class__ is _datetime else a")
            continue
        if name in ("started_at", "ended_at", "due_at", "completed_at"):
            read, write, _ = _after(v)
            if name != "started_at":
                read = [f"if {v} is not None:", *(f"  {line}" for line in read)]
                write = f"None if x is None else ({write})"
            fl += [f"  {line}" for line in read]
            dump += [f"  x = o.{name}", f"  w{i} = {write}"]
            continue
        if name == "attempts":
            fl += [
                f"  if {v}.__class__ is not list: raise _Mismatch",
                (
                    f"  {v} = (read_attempt({v}[0], a, au),) if len({v}) == 1"
                    f" else tuple([read_attempt(x, a, au) for x in {v}])"
                ),
            ]
            # One or two attempts (a retried run) without a comprehension (a call in 3.11).
            dump += [
                "  x = o.attempts; xn = len(x)",
                f"  if xn == 1: w{i} = [write_attempt(x[0], a, au)]",
                f"  elif xn == 2: w{i} = [write_attempt(x[0], a, au), write_attempt(x[1], a, au)]",
                f"  else: w{i} = [write_attempt(y, a, au) for y in x]",
            ]
            continue
        if name in ("status", "outcome"):
            fl.append(f"  {v} = _enum_{cl.__name__}[{v}]")
            dump.append(f"  w{i} = o.{name}._value_")
            continue
        lines, written = field_code(conv, name, t, ns, v)
        fl += [f"  {line}" for line in lines]
        dump.append(f"  w{i} = {written}")
    # One branch per length: the items present are checked, the trailing ones left out take
    # their defaults as values (no copy of the row, no check of a default).
    for n in range(width, required - 1, -1):
        keyword = "if" if n == width else "elif"
        load.append(f"  {keyword} n == {n}:")
        load.append(f"    {', '.join(f'v{i}' for i in range(n))}, = d")
        for i in range(width):
            if i < n:
                load += [f"  {line}" for line in per_field[i]]
            else:
                value = layout[i][1]
                literal = value is None or value == () or type(value) in (bool, str)
                load.append(
                    f"    v{i} = {value!r}" if literal else f"    v{i} = _value_{cl.__name__}[{i}]"
                )
    load.append("  else: raise _Mismatch")
    order = [a.name for a in attrs.fields(cl)]
    position = {name: i for i, (name, _) in enumerate(layout)}
    load.append(f"  o = _twin_{cl.__name__}()")
    for name in order:
        load.append(f"  o.{name} = k" if name == "node_key" else f"  o.{name} = v{position[name]}")
    if is_run:
        load.append("  o._row = d")
    load += [f"  o.__class__ = _cl_{cl.__name__}", "  return o"]
    ns[f"_cl_{cl.__name__}"] = cl
    for end in range(width, required, -1):
        default = pad[end - 1]
        ns[f"_d{cl.__name__}{end - 1}"] = default
        differs = (
            f"w{end - 1} is not None"
            if default is None
            else f"w{end - 1} != _d{cl.__name__}{end - 1}"
        )
        keyword = "if" if end == width else "elif"
        dump.append(f"  {keyword} {differs}: r = [{', '.join(f'w{i}' for i in range(end))}]")
    dump.append(f"  else: r = [{', '.join(f'w{i}' for i in range(required))}]")
    if is_run:
        dump.append("  _set_row(o, r)")
    dump.append("  return r")
    source = "\n".join(load) + "\n\n" + "\n".join(dump) + "\n"
    generate(source, ns, what=f"rows {cl.__name__}")


def _check_code(
    conv: OrjsonConverter,
    cl: type[Any],
    layout: tuple[tuple[str, Any], ...],
    ns: dict[str, Any],
    p: str,
    row: str,
) -> list[str]:
    """Lines that check the row ``row`` (a list) of ``cl`` as its reader would.

    The reader (``_gen_row``) without the building: each field gets the reader's own lines
    (``field_code``; a time's range check from ``_after``; an enum looked up), so a row is
    refused exactly when the reader would raise on it. Locals are ``{p}0``, ``{p}1``...; a
    run's defines the anchor ``a`` and ``ti`` (``int`` when it is UTC) for its attempts,
    which are checked inline. Lengths are tried commonest first. A row that is not a list
    is refused too, without a test of its type: an object unpacks to its keys and text to
    its characters, and the item a run has second, an attempt first, must be an ``int``.
    """
    types = {a.name: a.type for a in attrs.fields(cl)}
    width = len(layout)
    required = sum(1 for _, d in layout if d is attrs.NOTHING)
    is_run = cl is NodeExecution
    fields: list[list[str]] = []
    for i, (name, _) in enumerate(layout):
        v = f"{p}{i}"
        if name == "started_at" and is_run:
            fields.append(
                [
                    "try:",
                    f"  a = _datetimes[{v}]",
                    "except KeyError:",
                    f"  a = _read_datetime({v})",
                    "ti = int if a.tzinfo is _UTC else _NotInt",
                ]
            )
        elif name in ("started_at", "ended_at", "due_at", "completed_at"):
            fields.append(_after(v, optional=name != "started_at")[2])
        elif name == "attempts":
            inner = _check_code(conv, AttemptRecord, ATTEMPT_LAYOUT, ns, "x", "y")
            fields.append(
                [
                    f"if {v}.__class__ is not list: raise _Mismatch",
                    f"for y in {v}:",
                    *(f"  {line}" for line in inner),
                ]
            )
        elif name in ("status", "outcome"):
            ns[f"_enum_{cl.__name__}"] = {
                m.value: m for m in (NodeStatus if is_run else AttemptOutcome)
            }
            fields.append([f"_enum_{cl.__name__}[{v}]"])
        else:
            fields.append(field_code(conv, name, types[name], ns, v)[0])
    lines = [f"{p}n = len({row})"]
    lengths = sorted(range(required, width + 1), key=lambda n: (n != _USUAL[cl], -n))
    for k, n in enumerate(lengths):
        lines.append(f"{'if' if k == 0 else 'elif'} {p}n == {n}:")
        lines.append(f"  {', '.join(f'{p}{i}' for i in range(n))}, = {row}")
        lines += [f"  {line}" for i in range(n) for line in fields[i]]
    lines.append("else: raise _Mismatch")
    return lines


class RunsCodec(NamedTuple):
    """The stored ``node_executions``, generated by ``gen_runs_codec``."""

    write: Callable[[Mapping[str, Any]], dict[str, Any]]
    """The runs per node as JSON rows (an unread node's raw rows as they were read)."""
    read: Callable[[Any], NodeRuns]
    """Check every row (raises on any it does not take) and keep them, built when read."""
    check: Callable[[Any], None]
    """Check one run row as ``read`` does (raises on a row ``build`` would not take)."""
    build: Callable[[str, list[Any]], tuple[NodeExecution, ...]]
    """Build one node's runs from its rows (``check`` keeps ``build`` from failing)."""
    peek: Callable[[list[Any], str, Any], Any]
    """What a checked row's run delivered, read without building it (``peek_delivery``)."""


_AT: Final = {name: i for i, (name, _) in enumerate(RUN_LAYOUT)}
_STATUS, _INDEX, _OUTPUT, _PORT = (
    _AT[n] for n in ("status", "execution_index", "output", "output_port")
)
_MAIN: Final = dict(RUN_LAYOUT)["output_port"]


def peek_delivery(row: list[Any], port: str, index: Any) -> Any:
    """``NodeRuns.delivered`` of a run row ``check_run`` accepted, without building the run.

    Rule: the check took the row, so its status is a ``NodeStatus`` value, its
    ``execution_index`` an ``int`` and its port text or ``None``, and ``read_run`` puts
    those items and the output into the record as they are (a trailing item left out
    takes its ``RUN_LAYOUT`` default); so these comparisons are the built record's.
    """
    n = len(row)
    if (
        row[_INDEX] == index
        and row[_STATUS] == "completed"
        and (row[_PORT] if n > _PORT else _MAIN) == port
    ):
        return row[_OUTPUT] if n > _OUTPUT else None
    return NOT_DELIVERED


def gen_runs_codec(conv: OrjsonConverter) -> RunsCodec:
    """Generate the ``RunsCodec`` for ``WorkflowExecution.node_executions``.

    ``read`` raises on any shape it does not expect (the caller then takes the slow path
    through ``named_runs``, which builds every run and names each bad field). Records are
    built through their slot twins, as ``prana._fast_hooks.gen_row_hooks`` does.
    """
    check_layouts()
    ns: dict[str, Any] = {
        "_Mismatch": Mismatch,
        "_datetimes": DATETIMES,
        "_read_datetime": read_datetime,
        "_delta": timedelta,
        "_US": _US,
        "_UTC": _UTC,
        "_datetime": datetime,
        "_getattr": getattr,
        "_set_row": vars(StoredRow)["_row"].__set__,
    }
    for cl in (AttemptRecord, NodeExecution):
        twin = slot_twin(cl)
        if twin is None:  # pragma: no cover - tests/test_hot_records.py keeps the twins
            raise TypeError(f"{cl.__name__} lost its slot twin (see prana._model.slot_twin)")
        ns[f"_twin_{cl.__name__}"] = twin
    ns["_as_object"] = conv.get_unstructure_hook(NodeExecution)
    ns["_h_object"] = conv.get_structure_hook(NodeExecution)
    _gen_row(conv, AttemptRecord, ATTEMPT_LAYOUT, ns)
    _gen_row(conv, NodeExecution, RUN_LAYOUT, ns)
    ns["_bounds"] = _bounds
    ns["_YEAR"] = _YEAR
    ns["_NotInt"] = _NotInt
    ns["_iso"] = _iso
    ns["_NodeRuns"] = NodeRuns
    ns["_peek"] = peek_delivery
    checks = _check_code(conv, NodeExecution, RUN_LAYOUT, ns, "v", "d")
    # The check's names are bound as locals (a local is read faster than a global).
    used = set(re.findall(r"\b_\w+", "\n".join(checks))) | {"_Mismatch", "_NodeRuns", "_peek"}
    bound = ", ".join(f"{name}={name}" for name in sorted(used & {*ns, "_NodeRuns"}))
    source = "\n".join(
        [
            "def write_runs(m):",
            # Raw rows not read since loads are written back. A dict (the engine's) skips the
            # isinstance: NodeRuns is a Mapping, whose check runs ABCMeta's in Python.
            # Loops, not comprehensions: each comprehension is a call of its own in 3.11.
            "  out = {}",
            "  if m.__class__ is not dict and isinstance(m, _NodeRuns):",
            "    for k, r in m.raw_items().items():",
            "      if r.__class__ is list: out[k] = r",
            "      elif len(r) == 1: out[k] = [write_run(k, r[0])]",
            "      else: out[k] = [write_run(k, x) for x in r]",
            "    return out",
            # The usual run first, inline: one run under its own key (the same string
            # object: the engine and the reader file a run under its node_key), remembered.
            "  for k, r in m.items():",
            "    if len(r) == 1:",
            "      o = r[0]",
            "      if o.node_key is k and (w := _getattr(o, '_row', None)) is not None:",
            "        out[k] = [w]",
            "      else:",
            "        out[k] = [write_run(k, o)]",
            "    else:",
            "      out[k] = [write_run(k, x) for x in r]",
            "  return out",
            "",
            "def build_runs(k, r):",
            "  return (read_run(k, r[0]),) if len(r) == 1 else tuple([read_run(k, x) for x in r])",
            "",
            f"def check_run(d, {bound}):",
            "  if d.__class__ is not list: raise _Mismatch",
            *(f"  {line}" for line in checks),
            "",
            # Every row checked now (``check_run``'s lines, inline), built when its node is
            # first read (``NodeRuns``); an object row (a run filed under another key) is
            # built at once.
            f"def read_runs(m, {bound}):",
            "  if m.__class__ is not dict: raise _Mismatch",
            "  out = m.copy()",
            "  for k, r in m.items():",
            "    if r.__class__ is not list: raise _Mismatch",
            "    try:",
            "      for d in r:",
            *(f"        {line}" for line in checks),
            "    except Exception:",  # an object row (see write_run), or a bad row: build it,
            "      out[k] = build_runs(k, r)",  # which raises for a bad one
            "  return _NodeRuns(out, build_runs, _peek)",
            "",
        ]
    )
    generate(source, ns, what="node runs")
    return RunsCodec(
        ns["write_runs"], ns["read_runs"], ns["check_run"], ns["build_runs"], peek_delivery
    )


# -- the slow path: rows as objects of named fields, for the detailed converter ----------------


def named_runs(runs: Any, path: str) -> tuple[Any, list[str]]:
    """``node_executions``' rows as objects of named fields, and the problems met on the way.

    Rows become objects with their field names and times ISO text, so the detailed
    converter reports a bad value at its field. What cannot be rewritten (not a row, a
    row too long, a time counted from an unreadable anchor) is left for the converter or
    named in the problems returned.
    """
    if not isinstance(runs, dict):
        return runs, []
    problems: list[str] = []
    out: dict[str, Any] = {}
    for key, rows in runs.items():
        if not isinstance(rows, list):
            out[key] = rows
            continue
        out[key] = [
            _upgrade_run(key, row, f"{path}[{key!r}][{i}]", problems) for i, row in enumerate(rows)
        ]
    return out, problems


def _upgrade_run(key: str, row: Any, path: str, problems: list[str]) -> Any:
    """One run row as an object of its fields (anything but a row is left as it is)."""
    if not isinstance(row, list):
        return row
    obj = _named(row, RUN_LAYOUT, NodeExecution, path, problems)
    obj["node_key"] = key
    anchor = _anchor(obj.get("started_at"))
    _times(obj, ("completed_at",), anchor, path, problems)
    attempts = obj.get("attempts")
    if isinstance(attempts, list):
        upgraded = []
        for i, attempt in enumerate(attempts):
            if isinstance(attempt, list):
                where = f"{path}.attempts[{i}]"
                attempt = _named(attempt, ATTEMPT_LAYOUT, AttemptRecord, where, problems)
                _times(attempt, ("started_at", "ended_at", "due_at"), anchor, where, problems)
            upgraded.append(attempt)
        obj["attempts"] = upgraded
    return obj


def _named(
    row: list[Any],
    layout: tuple[tuple[str, Any], ...],
    cl: type[Any],
    path: str,
    problems: list[str],
) -> dict[str, Any]:
    """A row's items by field name, the layout's defaults filled in for the trailing ones."""
    if len(row) > len(layout):
        names = ", ".join(name for name, _ in layout)
        problems.append(
            f"{path}: expected at most {len(layout)} items for {cl.__name__} ({names}), "
            f"got {len(row)}"
        )
    obj: dict[str, Any] = {}
    for i, (name, default) in enumerate(layout):
        if i < len(row):
            obj[name] = row[i]
        elif default is not attrs.NOTHING:
            obj[name] = _json(default)
    return obj


def _json(value: Any) -> Any:
    """A layout default as the JSON value a row holds (an enum by value, a tuple a list)."""
    if isinstance(value, enum.Enum):
        return value.value
    return list(value) if isinstance(value, tuple) else value


def _anchor(value: Any) -> datetime | None:
    """A run's ``started_at`` when it is readable UTC text (the times after it need that)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    except ValueError:
        return None
    return parsed if parsed.utcoffset() == timedelta(0) else None


def _times(
    obj: dict[str, Any],
    names: tuple[str, ...],
    anchor: datetime | None,
    path: str,
    problems: list[str],
) -> None:
    """Rewrite the microsecond counts in ``obj``'s time fields as ISO text."""
    for name in names:
        value = obj.get(name)
        if type(value) is not int:
            continue
        if anchor is None:
            problems.append(
                f"{path}.{name}: {value} counts microseconds from the run's started_at, which "
                "is not a readable UTC time"
            )
            if name != "started_at":
                obj[name] = None
            continue
        try:
            obj[name] = (anchor + timedelta(microseconds=value)).isoformat()
        except OverflowError:
            problems.append(f"{path}.{name}: {value} microseconds is out of range")


def gen_execution_codec(
    conv: OrjsonConverter,
) -> tuple[Callable[[Any], dict[str, Any]], Callable[[Any, Any], Any]]:
    """``(write, read)`` for an execution body: an object of its fields, runs as above.

    ``conv`` is the tuned converter (``prana._serialization``), whose hooks read and write
    every field but ``node_executions``.
    """
    codec = gen_runs_codec(conv)
    return gen_fast_hooks(
        conv,
        WorkflowExecution,
        {"node_executions": (codec.write, codec.read)},
        omit_empty=frozenset({"other_pauses", "resuming"}),
    )
