"""The limits of one template render: the budget, value sizes, and the checks the hooks call.

Every number a template is bounded by is defined here (the docs' Templates page states the
same numbers). ``Budget`` is what one render has used so far; it lives in ``BUDGET`` (a
context variable) while ``prana._templates`` renders, so the checks below, called from the
sandbox's hooks in ``prana._template_env``, charge it without being handed it. Outside a
render (Jinja folding constants at compile time) nothing is charged, and the size checks
still refuse what is too big. Each check runs *before* the value is built, so a refused
template never allocates what it asked for; a refusal is a ``LimitError`` whose message
names the limit.
"""

from __future__ import annotations

import contextvars
import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, MappingView
from datetime import date, datetime, time, timedelta, tzinfo
from types import ModuleType
from typing import Any, cast

from jinja2 import Undefined
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedFormatter
from jinja2.utils import Namespace, generate_lorem_ipsum

from prana._jsoncheck import ScopeView

# --- limits (the docs' Templates page states the same numbers) --------------------------

MAX_SIZE = 1_000_000
"""Most characters (or items, counted through nesting) in a value a template builds, and
most characters one render may emit."""

MAX_STEPS = 100_000
"""Most steps in one render: a loop iteration, an operator or an attribute lookup is one
step, a filter, a test or a comparison ``FILTER_STEPS``, a call (a macro, a method, a
function) ``CALL_STEPS``: weights that follow what each costs in Jinja."""

FILTER_STEPS = 4
"""Steps a filter, a test or a comparison costs."""

CALL_STEPS = 20
"""Steps a call (a macro, a method, a function) costs."""

MAX_WORK = 10_000_000
"""Most items one render may have filters, methods, operators and comparisons read."""

MAX_RANGE = 100_000
"""Most numbers one ``range(...)`` may give (Jinja's own sandbox default)."""

MAX_FORMAT_WIDTH = 1_000
"""Largest width or precision in a format spec (``'%05d'``, ``'{:>10}'``, ``|format``)."""

MAX_INT_BITS = 4_096
"""Largest integer an operator may build, in bits (about 1,233 decimal digits)."""

MAX_LIPSUM_WORDS = 10_000
"""Most words ``lipsum(n, html, min, max)`` may write (``n * max``)."""

MAX_DATE_FORMAT = 1_000
"""Most characters in a date format given to ``strptime`` or ``strftime`` (CPython's
``_strptime`` reads its format in quadratic time), and in the text ``strptime`` reads."""

TEXT_CODECS = frozenset(
    {
        "utf-8", "utf8", "utf-16", "utf16", "utf-16-le", "utf-16le", "utf-16-be", "utf-16be",
        "utf-32", "utf32", "utf-32-le", "utf-32le", "utf-32-be", "utf-32be", "ascii",
        "us-ascii", "latin-1", "latin1", "iso-8859-1", "iso8859-1", "cp1252", "windows-1252",
    }
)  # fmt: skip
"""The codecs ``str.encode`` and ``bytes.decode`` may use in a template, all linear. Others
are refused by the sandbox: ``punycode`` (and ``idna``, built on it) is quadratic, and
naming a codec may import its module."""

PPRINT_DEPTH = 16

PREFIX = "__prana_"


class LimitError(Exception):
    """A template went past one of the limits above; the message says which and how far."""


class NotAValueError(Exception):
    """A template's value is a function, method, class or iterator (``{{ range }}``,
    ``| map(...)`` without ``| list``), or holds one: not data, and its text would carry a
    memory address."""


_OBJECT_REPR: Any = object.__repr__
_OBJECT_STR: Any = object.__str__


def refuse_non_value(value: Any) -> None:
    """Raise ``NotAValueError`` if ``value`` is callable, an iterator or an object whose text
    is Python's default repr (a memory address): a template gives data."""
    if hasattr(value, "__next__"):  # a generator (map, select, batch...), an iterator, a cycler
        raise NotAValueError(
            f"the value is a {type(value).__name__} (an iterator, as the filters map, select, "
            "reject, batch and reverse give), not data: add | list"
        )
    if not callable(value):
        tp = type(value)
        if tp.__repr__ is _OBJECT_REPR and tp.__str__ is _OBJECT_STR:
            if isinstance(value, ScopeView):
                raise not_data(value)
            raise NotAValueError(
                f"the value is a {tp.__name__} object, not data: its text would be a memory address"
            )
        return
    owner = getattr(value, "__self__", None)
    if isinstance(value, type):
        what = "a class"
    elif owner is not None and not isinstance(owner, ModuleType):
        what = f"the method {getattr(value, '__name__', '?')!r} of a {type(owner).__name__}"
    else:
        what = "a function"
    raise NotAValueError(
        f"the value is {what}, not data: call it with (), or name a key that is there"
    )


def refuse_inside(value: Any, *, leaving: bool = False) -> None:
    """What a list, tuple or dict (or set, dict view, namespace) holds, all the way down, is
    data.

    The rule: a list or dict literal (``[$input.main.a]``) or a filter's list
    (``map(attribute='email') | list``) may hold what no template's value may be: an
    ``Undefined`` (a missing key) raises its error, a function, method or iterator, as an
    item or a dict key, ``NotAValueError``. ``leaving``: ``value`` is a template's value
    (``refuse_in_value``), so a namespace, dict view or set in it is refused too. The caller
    sized ``value`` first (``checked``): the walk is bounded.
    """
    tp = type(value)
    if tp is list or tp is tuple:  # the usual flat list: one pass, nothing allocated
        for item in value:
            if type(item) not in PLAIN:
                break
        else:
            return
    elif tp is dict:
        for key, item in value.items():
            if type(key) not in PLAIN or type(item) not in PLAIN:
                break
        else:
            return
    seen: dict[int, Any] = {}  # holds what it walked: an id is not reused during the walk
    stack: list[Any] = [value]
    while stack:
        container = stack.pop()
        if id(container) in seen:
            continue
        seen[id(container)] = container
        if type(container) in _NESTED:
            pass
        elif leaving and isinstance(container, NOT_DATA):
            raise not_data(container)
        elif isinstance(container, Namespace):
            container = container._Namespace__attrs  # its only storage
        elif isinstance(container, MappingView):
            container = tuple(cast("Iterable[Any]", container))  # .items(): its pairs
            seen[id(container)] = container
        items: Iterable[Any] = container
        if isinstance(container, dict):
            items = container.values()
            for key in container:
                if type(key) not in PLAIN:
                    _refuse_item(key, stack, leaving)
        for item in items:
            if type(item) not in PLAIN:
                _refuse_item(item, stack, leaving)


def _refuse_item(item: Any, stack: list[Any], leaving: bool) -> None:
    """An item of a container ``refuse_inside`` walks: a container goes on ``stack``."""
    if type(item) in _NESTED or isinstance(item, _CONTAINERS):
        stack.append(item)
    elif isinstance(item, Undefined):
        item._fail_with_undefined_error()
    elif leaving and is_object(item):
        raise not_data(item)
    else:
        refuse_non_value(item)


PLAIN = frozenset({str, int, float, bool, type(None)})
"""The types of plain data: written as text by ``str``, with nothing inside to walk."""
_NESTED = frozenset({dict, list, tuple})
_CONTAINERS = (list, tuple, dict, set, frozenset, Namespace, MappingView)
NOT_DATA = (set, frozenset, Namespace, MappingView)
"""Containers a template may build or reach that are not data: JSON has no form for them,
so a template's value holds none (``refuse_in_value``); written as text, they are text."""


_OBJECTS = (ScopeView, range, bytes, bytearray, date, time, timedelta, tzinfo)
"""What a template may reach or build that is neither data nor a container of data: the
action would get the Python object, the record its repr. (A ``datetime`` is data: the record
writes it as ISO 8601 text.)"""

_ADVICE = (
    (range, "add | list"),
    (bytes | bytearray, "call .decode()"),
    (date | time, "call .isoformat()"),
    (timedelta, "call .total_seconds()"),
)


def is_object(value: Any) -> bool:
    """Whether ``value`` is one of ``_OBJECTS`` (a template's value holds none)."""
    return isinstance(value, _OBJECTS) and not isinstance(value, datetime)


def not_data(value: Any) -> NotAValueError:
    """The error for a template's value that is (or holds) one of ``NOT_DATA`` or
    ``_OBJECTS``."""
    if isinstance(value, Namespace):
        return NotAValueError(
            "the value is a namespace, not data: read its attributes (ns.total), or build a "
            "dict ({'total': ns.total})"
        )
    if isinstance(value, ScopeView):
        return NotAValueError(
            f"the value is the whole of {value.root}, not data: name one of its keys "
            f"({value.root}.<key>), or add | list for its keys"
        )
    name = type(value).__name__
    advice = next((text for kind, text in _ADVICE if isinstance(value, kind)), None)
    if advice is None:
        advice = "add | list" if isinstance(value, NOT_DATA) else "add | string"
    return NotAValueError(f"the value is a {name}, not data: {advice}")


def refuse_in_value(value: Any) -> None:
    """Raise ``NotAValueError`` if a template's value (a param, a condition: what leaves the
    template) is not plain data: ``refuse_inside`` with ``leaving``, so a namespace, dict
    view, set, scope view (``$nodes``), range, bytes, date, time or timedelta is refused as a
    whole or inside.

    The caller refused a value that is not data at all (``refuse_non_value``) and sized it
    (``checked``) first; a plain value costs one set lookup.
    """
    if type(value) in PLAIN:
        return
    if isinstance(value, list | tuple | dict):
        refuse_inside(value, leaving=True)
    elif isinstance(value, NOT_DATA) or is_object(value):
        raise not_data(value)


def refuse_in_text(value: Any) -> None:
    """Raise ``NotAValueError`` if writing ``value`` as text would write something that is
    not data: a function, method, class or iterator, an object with Python's default repr,
    or a list, dict, dict view or namespace holding one (its text is their repr, with a
    memory address that differs on every run). An ``Undefined`` in one raises its error.

    The rule: every place a template turns a value into text calls it first (the finalize
    hook, ``~``, ``%``, ``str.format``, the filters but those that pass objects along, and
    ``join``'s items). A top-level ``Undefined`` is let through: its ``str`` raises. The
    callers sized ``value`` first: the walk is bounded.
    """
    tp = type(value)
    if tp in PLAIN:
        return
    if tp in _NESTED:
        refuse_inside(value)
        return
    if isinstance(value, Undefined):
        return
    refuse_non_value(value)
    if isinstance(value, _CONTAINERS):
        refuse_inside(value)


def _in_text(value: Any) -> str:
    """A value inside a list or dict written into text that JSON has no form for: a datetime
    as ISO 8601 (as one outside), an ``Undefined`` raises its error, a function, method or
    iterator is refused, anything else (an object from ``$env``) is its ``str``."""
    if isinstance(value, Undefined):
        return str(value)  # raises, with the message of the undefined
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    refuse_in_text(value)
    return str(value)


# --- the budget of one render ------------------------------------------------------------


class Budget:
    """What one render has used so far; ``sizes`` memoises the size of containers it saw."""

    __slots__ = ("emitted", "sizes", "steps", "work")

    def __init__(self) -> None:
        self.steps = 0
        self.work = 0
        self.emitted = 0
        self.sizes: dict[int, tuple[Any, int]] = {}


BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "prana_template_budget", default=None
)
"""The budget of the render in progress; ``None`` outside one (e.g. constant folding)."""


def steps_exceeded() -> LimitError:
    return LimitError(
        f"over the template limit of {MAX_STEPS:,} steps in one render (a loop iteration, an "
        f"operator or a lookup is a step, a filter, test or comparison {FILTER_STEPS}, a call "
        f"{CALL_STEPS}): loop over less data, or do the work in an action"
    )


def step(steps: int = 1) -> None:
    budget = BUDGET.get()
    if budget is not None:
        budget.steps += steps
        if budget.steps > MAX_STEPS:
            raise steps_exceeded()


def charge(units: int) -> None:
    budget = BUDGET.get()
    if budget is not None:
        budget.work += units
        if budget.work > MAX_WORK:
            raise LimitError(
                f"over the template limit of {MAX_WORK:,} items read by filters, methods, "
                "operators and comparisons in one render: work on less data, or do the work "
                "in an action"
            )


def emit(count: int) -> None:
    budget = BUDGET.get()
    if budget is not None:
        budget.emitted += count
        if budget.emitted > MAX_SIZE:
            raise LimitError(
                f"over the template limit of {MAX_SIZE:,} characters rendered in one render"
            )


# --- sizes -------------------------------------------------------------------------------

_ONE = bool | float | None | datetime | date | time | timedelta


def _leaf_size(value: Any) -> int | None:
    """The size of a value with no items inside; ``None`` for a container."""
    tp = type(value)
    if tp is str or tp is bytes:
        return len(value)
    if tp is int:
        return int(value.bit_length()) // 3 + 1
    if isinstance(value, _ONE | Undefined):
        return 1
    if isinstance(value, str | bytes | bytearray):
        return len(value)
    if isinstance(value, int):
        return int(value).bit_length() // 3 + 1
    if isinstance(value, range):
        return len(value) + 1
    if isinstance(value, list | tuple | set | frozenset | Mapping | Namespace):
        return None
    return 1


def _items(value: Any) -> Iterator[Any]:
    """What a container holds: a mapping's keys and values, a namespace's too."""
    if isinstance(value, Namespace):
        value = value._Namespace__attrs  # its only storage
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield key
            yield item
    else:
        yield from value


def size_of(value: Any) -> int:
    """The size of ``value``: characters, digits, or items counted through nesting.

    Shared items count each time they appear (that is what printing or comparing them
    costs), so a list of lists built by repetition is as big as it prints. The walk stops
    past ``MAX_SIZE`` (returning ``MAX_SIZE + 1``) and memoises containers per render, so
    asking again costs a lookup. A value that contains itself is over any limit.
    """
    leaf = _leaf_size(value)
    if leaf is not None:
        return leaf
    budget = BUDGET.get()
    memo = budget.sizes if budget is not None else {}
    hit = memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    too_big = MAX_SIZE + 1
    on_stack = {id(value)}
    stack: list[list[Any]] = [[value, _items(value), 1]]
    visited = 0
    try:
        while stack:
            frame = stack[-1]
            pushed = False
            for child in frame[1]:
                visited += 1
                size = _leaf_size(child)
                if size is None:
                    hit = memo.get(id(child))
                    if hit is not None and hit[0] is child:
                        size = hit[1]
                    elif id(child) in on_stack:
                        size = too_big
                    else:
                        on_stack.add(id(child))
                        stack.append([child, _items(child), 1])
                        pushed = True
                        break
                frame[2] += size
                if frame[2] > MAX_SIZE:
                    memo[id(value)] = (value, too_big)
                    return too_big
            if pushed:
                continue
            stack.pop()
            on_stack.discard(id(frame[0]))
            memo[id(frame[0])] = (frame[0], frame[2])
            if not stack:
                return int(frame[2])
            stack[-1][2] += frame[2]
            if stack[-1][2] > MAX_SIZE:
                memo[id(value)] = (value, too_big)
                return too_big
        return too_big  # pragma: no cover - the loop always returns
    finally:
        charge(visited)


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bytes):
        return "bytes"
    return f"a {type(value).__name__}"


def over(what: str, size: int) -> LimitError:
    shown = f"{size:,}" if size <= MAX_SIZE else f"more than {MAX_SIZE:,}"
    return LimitError(
        f"{what} would hold {shown} characters or items, over the template limit of {MAX_SIZE:,}"
    )


def checked(value: Any, what: str = "a value") -> int:
    """The size of ``value``, charged to the render; over ``MAX_SIZE`` is an error."""
    tp = type(value)
    if tp is int or tp is float or tp is bool or value is None:
        return 1  # free: reading a number costs nothing worth counting
    size = len(value) if tp is str else size_of(value)
    if size > MAX_SIZE:
        raise over(what, size)
    charge(size)
    return size


def check_result(value: Any, what: str) -> None:
    """A freshly built value: strings by length, containers by their own item count, an
    integer by its bits (``|int(base=16)``, ``int.from_bytes``: ``//`` and ``%`` on two
    integers of millions of bits take seconds each)."""
    if isinstance(value, str | bytes | list | tuple | dict):
        count = len(value)
        if count > MAX_SIZE:
            raise over(what, count)
        charge(count)
    elif type(value) is int and value.bit_length() > MAX_INT_BITS:
        raise int_limit(value.bit_length())


def shallow(value: Any) -> None:
    """Charge a pass over the top level of ``value`` (what ``list``, ``map``, ... read)."""
    try:
        charge(len(value) + 1)
    except TypeError:
        charge(1)


# --- operators ---------------------------------------------------------------------------

_SEQUENCES = (str, bytes, list, tuple)
NUMBERS = frozenset({int, float})


def check_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, _SEQUENCES) and isinstance(times, int):
            built = size_of(seq) * max(int(times), 0)
            if built > MAX_SIZE:
                kind = "characters" if isinstance(seq, str | bytes) else "items"
                raise LimitError(
                    f"{_describe_value(seq)} * {times} would build {built:,} {kind}, over the "
                    f"template limit of {MAX_SIZE:,}"
                )
            charge(built)
            return
    if isinstance(left, int) and isinstance(right, int):
        bits = int(left).bit_length() + int(right).bit_length()
        if bits > MAX_INT_BITS:
            raise int_limit(bits)


def int_limit(bits: float) -> LimitError:
    return LimitError(
        f"an integer of about {bits:,.0f} bits is over the template limit of {MAX_INT_BITS:,} bits"
    )


def check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = exponent * math.log2(abs(base))
        if bits > MAX_INT_BITS:
            raise int_limit(bits)


def check_add(left: Any, right: Any) -> None:
    if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        built = size_of(left) + size_of(right)
        if built > MAX_SIZE:
            raise over(f"{_describe_value(left)} + {_describe_value(right)}", built)
        charge(built)


_PRINTF = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?"
    r"[hlL]?(?P<conversion>.?)",
    re.DOTALL,
)


def check_width(text: str | None, where: str) -> int:
    if text is None:
        return 0
    if text == "*":
        raise LimitError(
            f"a '*' width in {where} is not allowed in templates; write the width as a number "
            f"(at most {MAX_FORMAT_WIDTH:,})"
        )
    if len(text) > 9 or int(text) > MAX_FORMAT_WIDTH:
        raise LimitError(
            f"the width or precision {text} in {where} is over the template limit of "
            f"{MAX_FORMAT_WIDTH:,}"
        )
    return int(text)


def check_printf(fmt: Any, args: Any) -> None:
    """Check a ``%`` format and its arguments before formatting: widths and the result size."""
    if not isinstance(fmt, str | bytes):
        return
    refuse_in_text(args)
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    positional = args if isinstance(args, tuple) else (args,)
    index = 0
    total = len(text)
    for match in _PRINTF.finditer(text):
        if match["conversion"] == "%" and match["key"] is None:
            continue
        width = check_width(match["width"], "a % format")
        precision = check_width(match["precision"], "a % format")
        key = match["key"]
        arg: Any = None
        if key is not None and isinstance(args, Mapping):
            arg = args.get(key)
        elif index < len(positional):
            arg = positional[index]
            index += 1
        total += max(width, precision) + size_of(arg)
        if total > MAX_SIZE:
            raise over("the % format", total)
    charge(total)


def check_percent(left: Any, right: Any) -> None:
    if isinstance(left, str | bytes):
        check_printf(left, right)


_SPEC_NUMBER = re.compile(r"\d+")


class Formatter(SandboxedFormatter):
    """``str.format`` in the sandbox, with format-spec widths and the result size bounded."""

    def __init__(self, env: Any, template: str) -> None:
        super().__init__(env)
        self._total = len(template)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        checked(value, "a formatted value")
        refuse_in_text(value)
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        for number in _SPEC_NUMBER.findall(format_spec):
            check_width(number, f"the format spec {format_spec!r}")
        checked(value, "a formatted value")
        refuse_in_text(value)
        text = super().format_field(value, format_spec)
        self._total += len(text)
        if self._total > MAX_SIZE:
            raise over("str.format", self._total)
        return text


# --- methods, filters and globals that build big values from small arguments -------------


def check_width_result(length: int, width: Any, what: str) -> None:
    if isinstance(width, int) and max(length, int(width)) > MAX_SIZE:
        raise over(what, max(length, int(width)))


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _replaced_size(text: Any, old: Any, new: Any, count: Any = -1) -> int:
    if not (isinstance(text, str | bytes) and isinstance(old, type(text))):
        return 0
    if not isinstance(new, str | bytes):
        return 0
    hits = text.count(old) if old else len(text) + 1  # type: ignore[arg-type] # same type
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(0, len(new) - len(old))


def pre_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    size = _replaced_size(text, old, new, count)
    if size > MAX_SIZE:
        raise over("replace", size)


def joined(separator: Any, items: list[Any]) -> None:
    total = len(separator) * max(len(items) - 1, 0) if isinstance(separator, str | bytes) else 0
    for item in items:
        total += size_of(item)
        if total > MAX_SIZE:
            raise over("join", total)
    charge(total)


_SCANS_ARGUMENTS_ONLY = frozenset(
    {"endswith", "get", "items", "keys", "removeprefix", "removesuffix", "startswith", "values"}
)
"""Methods of strings, lists and dicts whose work is their arguments', not their receiver's."""

_SCANNED = (str, bytes, bytearray, list, tuple, dict)


def _codec(encoding: Any, name: str) -> None:
    if not isinstance(encoding, str):
        return  # the method itself refuses it
    if encoding.strip().lower().replace("_", "-").replace(" ", "-") not in TEXT_CODECS:
        raise SecurityError(
            f"the codec {encoding[:40]!r} is not allowed in {name}() in templates; use one of "
            "utf-8, utf-16, utf-32, ascii, latin-1, cp1252"
        )


def _date_format(text: Any, what: str) -> None:
    if isinstance(text, str) and len(text) > MAX_DATE_FORMAT:
        raise LimitError(
            f"{what} of {len(text):,} characters is over the template limit of {MAX_DATE_FORMAT:,}"
        )


def method_check(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Check a call of a builtin method before it runs; may return new args.

    Its receiver is charged when the method reads it (``s.isidentifier()``, ``s.count(x)``:
    the arguments alone say nothing of that work); methods that build big values or run
    slowly from small arguments are checked first.
    """
    owner = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if isinstance(owner, _SCANNED) and name not in _SCANS_ARGUMENTS_ONLY:
        charge(len(owner))
    if isinstance(owner, str) and name == "encode":
        _codec(args[0] if args else kwargs.get("encoding", "utf-8"), "encode")
    elif isinstance(owner, bytes | bytearray) and name == "decode":
        _codec(args[0] if args else kwargs.get("encoding", "utf-8"), "decode")
    if isinstance(owner, str | bytes):
        if name in ("center", "ljust", "rjust", "zfill") and args:
            check_width_result(len(owner), args[0], f"{name}({args[0]!r})")
        elif name == "expandtabs":
            tab = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(tab, int):
                tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
                size = len(owner) + tabs * tab
                if size > MAX_SIZE:
                    raise over("expandtabs", size)
        elif name == "replace" and len(args) >= 2:
            pre_replace(owner, *args[:3])
        elif name == "join" and args:
            items = list(args[0])
            joined(owner, items)
            return (items, *args[1:])
        elif name == "translate" and args and isinstance(args[0], Mapping):
            longest = max(
                (len(v) if isinstance(v, str | bytes) else 1 for v in args[0].values()), default=1
            )
            if len(owner) * max(longest, 1) > MAX_SIZE:
                raise over("translate", len(owner) * longest)
    elif isinstance(owner, int) and name == "to_bytes":
        length = args[0] if args else kwargs.get("length", 1)
        if isinstance(length, int) and length > MAX_SIZE:
            raise over("int.to_bytes", length)
    elif name == "from_bytes" and isinstance(owner, type) and issubclass(owner, int):
        data = args[0] if args else kwargs.get("bytes")
        if isinstance(data, bytes | bytearray) and len(data) * 8 > MAX_INT_BITS:
            raise int_limit(len(data) * 8)
    elif name in ("strptime", "strftime") and (
        isinstance(owner, date | time) or owner in (datetime, date, time)
    ):
        if name == "strptime":
            _date_format(args[0] if args else None, "the text given to strptime")
            _date_format(args[1] if len(args) > 1 else None, "the strptime format")
        else:
            _date_format(args[0] if args else kwargs.get("format"), "the strftime format")
    return args


def template_range(*args: Any) -> range:
    """``range`` for templates: at most ``MAX_RANGE`` numbers."""
    numbers = range(*args)
    try:
        count = len(numbers)
    except OverflowError:
        count = MAX_RANGE + 1
    if count > MAX_RANGE:
        raise LimitError(
            f"range of {count:,} numbers is over the template limit of {MAX_RANGE:,}"
            if count <= 10**18
            else f"range is over the template limit of {MAX_RANGE:,} numbers"
        )
    return numbers


def template_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """``lipsum`` for templates: at most ``MAX_LIPSUM_WORDS`` words."""
    words = n * (min if min > max else max) if isinstance(n, int) else 0
    if words > MAX_LIPSUM_WORDS:
        raise LimitError(
            f"lipsum(n={n}, max={max}) could write {words:,} words, over the template limit "
            f"of {MAX_LIPSUM_WORDS:,}"
        )
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def counted(iterable: Iterable[Any]) -> Iterator[Any]:
    """Feed a ``{% for %}`` loop, one step per iteration."""
    budget = BUDGET.get()
    if budget is None:
        yield from iterable
        return
    for item in iterable:
        budget.steps += 1
        if budget.steps > MAX_STEPS:
            raise steps_exceeded()
        yield item


def concat(*pieces: Any) -> str:
    """``a ~ b``: the pieces as text, checked before they are joined."""
    total = 0
    for piece in pieces:
        total += size_of(piece)
        if total > MAX_SIZE:
            raise over("the ~ concatenation", total)
    charge(total)
    for piece in pieces:
        if type(piece) is not str:
            refuse_in_text(piece)
    text = "".join([piece if type(piece) is str else str(piece) for piece in pieces])
    if len(text) > MAX_SIZE:
        raise over("the ~ concatenation", len(text))
    return text


def operand(value: Any) -> Any:
    """A comparison operand or dict key: comparing or hashing it walks it, so size it first."""
    step(FILTER_STEPS // 2)
    checked(value, "a compared value")
    return value


_ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "lteq": operator.le,
    "gt": operator.gt,
    "gteq": operator.ge,
}
"""Jinja's ordering operators, by the name its ``Compare`` nodes give them."""


def ordered(left: Any, op: str, right: Any) -> Any:
    """``left <op> right`` in a retry condition: false when either side is None (missing).

    NoETL writes ``status_code >= 500 or error != None``; an error without a status code
    has ``status_code`` None, and the comparison must be false, not an error.
    """
    if left is None or right is None:
        return False
    return _ORDERINGS[op](left, right)


def sliced(value: Any, start: Any, stop: Any, stride: Any) -> Any:
    """``value[start:stop:stride]``: a step, and the copy it makes charged."""
    step()
    result = value[start:stop:stride]
    check_result(result, "a slice")
    return result


def buffered(value: Any) -> Any:
    """Output written into a buffer (a macro, a call block, a filter block, a set block)."""
    text = finalize(value)
    emit(len(text))
    return text


LOOP = PREFIX + "loop"
CONCAT = PREFIX + "concat"
OPERAND = PREFIX + "operand"
BUFFERED = PREFIX + "buffered"
SLICED = PREFIX + "sliced"
ORDERED = PREFIX + "ordered"
INTERNAL_FILTERS: dict[str, Callable[..., Any]] = {
    ORDERED: ordered,
    LOOP: counted,
    CONCAT: concat,
    OPERAND: operand,
    BUFFERED: buffered,
    SLICED: sliced,
}
"""The counting helpers ``_Bounder`` inserts; filters, so compiled code calls them directly."""


def bounded_dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` for ``|tojson``: sized first, streamed with a cap when indented."""
    checked(value, "a value given to tojson")
    indent = kwargs.get("indent")
    if indent is None:
        text = json.dumps(value, **kwargs)
    else:
        if isinstance(indent, int):
            check_width(str(indent), "tojson(indent=...)")
        elif isinstance(indent, str) and len(indent) > MAX_FORMAT_WIDTH:
            check_width(str(len(indent)), "tojson(indent=...)")
        total = 0
        chunks: list[str] = []
        for chunk in json.JSONEncoder(**kwargs).iterencode(value):
            total += len(chunk)
            if total > MAX_SIZE:
                raise over("tojson", total)
            chunks.append(chunk)
        text = "".join(chunks)
    if len(text) > MAX_SIZE:
        raise over("tojson", len(text))
    return text


def finalize(value: Any) -> Any:
    """Render values in text the way a JSON-minded workflow author expects."""
    tp = type(value)
    if tp is str:
        return value
    if tp is int or tp is float:
        return str(value)
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, dict | list):
        checked(value, "a rendered value")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_in_text)
    if isinstance(value, Undefined):
        return str(value)  # raises, with the message of the undefined
    refuse_non_value(value)
    if not isinstance(value, str | int | float):
        checked(value, "a rendered value")
        refuse_in_text(value)
    return str(value)
