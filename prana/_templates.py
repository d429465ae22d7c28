"""Templates in node params: ``{{ expr }}`` over ``$input``, ``$nodes``, ``$vars`` and friends.

Theory of operation. ``compile_params`` walks a params structure once and returns ``None``
when no string holds a template (``{{`` or ``{%``), so most nodes pay nothing. Otherwise
each template string is compiled once (cached by its text, since the same workflow runs
many times) into one of three forms:

- a *path* (``{{ $input.main.user.id }}``): evaluated by walking dicts and lists directly,
  falling back to Jinja for anything else (an object attribute, a missing key);
- an *expression* (the string is exactly one ``{{ ... }}``, whitespace around allowed):
  a sandboxed Jinja expression whose value keeps its native type (int, dict, ``None``...);
- a *text* (text mixed with ``{{ }}`` or ``{% %}``): a sandboxed Jinja template rendered
  to a string, where ``None`` renders as ``""``, booleans as ``true``/``false``, dicts and
  lists as compact JSON and datetimes in ISO 8601.

Jinja names cannot start with ``$``, so ``$name`` inside ``{{ }}``/``{% %}`` (outside
string literals) is rewritten to an internal name before compiling. A free name that is
not one of the scope roots (``$input``, ``$nodes``, ``$vars``, ``$env``, ``$execution``,
``$workflow``, ``$now``) or a Jinja global (``range``, ``dict``...) is refused at compile
time, so a forgotten ``$`` or a misspelt root is an error rather than a silent ``None``.
Below the root, undefined is strict: a missing key, attribute or list item is an error
that lists what is there (``| default(...)`` and ``is defined`` still test for it).

Templates are untrusted (docs: Security model), so evaluation is sandboxed and bounded.
The sandbox is Jinja's ``ImmutableSandboxedEnvironment``: no ``_``-prefixed attributes, no mutating
methods. The bounds use the sandbox's own hooks (intercepted operators, ``call``, the
filters, tests and globals, the finalize hook, the JSON policy) plus one rewrite of the
parsed template (loops, ``~``, comparisons, dict keys and buffered output go through
counting helpers):

- every value a template builds has a *size* (characters of a string, items of a list or
  dict counted through nesting, digits of an int) of at most ``MAX_SIZE``, checked
  before anything is allocated; a render emits at most ``MAX_SIZE`` characters;
- one render (all the templates of a node's params, or one condition) takes at most
  ``MAX_STEPS`` steps (a loop iteration, a call, a filter, a test, an operator) and walks
  at most ``MAX_WORK`` items (what filters, methods, operators and comparisons read);
- ``range`` gives at most ``MAX_RANGE`` numbers; a width or precision in a format spec
  (``%``, ``str.format``, ``|format``) is at most ``MAX_FORMAT_WIDTH``; an integer has at
  most ``MAX_INT_BITS`` bits; ``lipsum`` writes at most ``MAX_LIPSUM_WORDS`` words.

Every failure (syntax, sandbox, undefined, a limit, arithmetic) raises ``TemplateError``
naming the param path; the executor records it as a non-retryable ``template_error``.
Dict keys are not rendered; static parts of the params are shared with the original,
never mutated.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import json
import math
import pprint
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import date, datetime, time, timedelta
from typing import Any, cast

from jinja2 import (
    StrictUndefined,
    TemplateSyntaxError,
    Undefined,
    meta,
    nodes,
    pass_environment,
    pass_eval_context,
)
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.filters import make_attrgetter
from jinja2.parser import Parser
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter
from jinja2.utils import Namespace, consume, generate_lorem_ipsum, missing
from jinja2.visitor import NodeTransformer

__all__ = [
    "CALL_STEPS",
    "FILTER_STEPS",
    "MAX_FORMAT_WIDTH",
    "MAX_INT_BITS",
    "MAX_LIPSUM_WORDS",
    "MAX_RANGE",
    "MAX_SIZE",
    "MAX_STEPS",
    "MAX_WORK",
    "CompiledParams",
    "TemplateError",
    "check_condition",
    "compile_params",
    "evaluate",
]

ROOTS: tuple[str, ...] = (
    "input",
    "nodes",
    "vars",
    "env",
    "execution",
    "workflow",
    "now",
    "webhooks",
)
"""The scope roots a template may name, each written with a ``$``."""

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

_PPRINT_DEPTH = 16

_PREFIX = "__prana_"
_ROOT_SET = frozenset(ROOTS)
_ROOTS_TEXT = ", ".join(f"${r}" for r in ROOTS)
_CACHE_SIZE = 4096


class TemplateError(ValueError):
    """A template could not be compiled or evaluated; ``path`` names the param."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.message))


class _CompileError(Exception):
    """A template failed to compile; the caller adds the param path."""


class _LimitError(Exception):
    """A template went past one of the limits above; the message says which and how far."""


# --- the budget of one render ------------------------------------------------------------


class _Budget:
    """What one render has used so far; ``sizes`` memoises the size of containers it saw."""

    __slots__ = ("emitted", "sizes", "steps", "work")

    def __init__(self) -> None:
        self.steps = 0
        self.work = 0
        self.emitted = 0
        self.sizes: dict[int, tuple[Any, int]] = {}


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "prana_template_budget", default=None
)
"""The budget of the render in progress; ``None`` outside one (e.g. constant folding)."""


def _steps_exceeded() -> _LimitError:
    return _LimitError(
        f"over the template limit of {MAX_STEPS:,} steps in one render (a loop iteration, an "
        f"operator or a lookup is a step, a filter, test or comparison {FILTER_STEPS}, a call "
        f"{CALL_STEPS}): loop over less data, or do the work in an action"
    )


def _step(steps: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.steps += steps
        if budget.steps > MAX_STEPS:
            raise _steps_exceeded()


def _charge(units: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.work += units
        if budget.work > MAX_WORK:
            raise _LimitError(
                f"over the template limit of {MAX_WORK:,} items read by filters, methods, "
                "operators and comparisons in one render: work on less data, or do the work "
                "in an action"
            )


def _emit(count: int) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.emitted += count
        if budget.emitted > MAX_SIZE:
            raise _LimitError(
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


def _size(value: Any) -> int:
    """The size of ``value``: characters, digits, or items counted through nesting.

    Shared items count each time they appear (that is what printing or comparing them
    costs), so a list of lists built by repetition is as big as it prints. The walk stops
    past ``MAX_SIZE`` (returning ``MAX_SIZE + 1``) and memoises containers per render, so
    asking again costs a lookup. A value that contains itself is over any limit.
    """
    leaf = _leaf_size(value)
    if leaf is not None:
        return leaf
    budget = _BUDGET.get()
    memo = budget.sizes if budget is not None else {}
    hit = memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    over = MAX_SIZE + 1
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
                        size = over
                    else:
                        on_stack.add(id(child))
                        stack.append([child, _items(child), 1])
                        pushed = True
                        break
                frame[2] += size
                if frame[2] > MAX_SIZE:
                    memo[id(value)] = (value, over)
                    return over
            if pushed:
                continue
            stack.pop()
            on_stack.discard(id(frame[0]))
            memo[id(frame[0])] = (frame[0], frame[2])
            if not stack:
                return int(frame[2])
            stack[-1][2] += frame[2]
            if stack[-1][2] > MAX_SIZE:
                memo[id(value)] = (value, over)
                return over
        return over  # pragma: no cover - the loop always returns
    finally:
        _charge(visited)


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bytes):
        return "bytes"
    return f"a {type(value).__name__}"


def _over(what: str, size: int) -> _LimitError:
    shown = f"{size:,}" if size <= MAX_SIZE else f"more than {MAX_SIZE:,}"
    return _LimitError(
        f"{what} would hold {shown} characters or items, over the template limit of {MAX_SIZE:,}"
    )


def _checked(value: Any, what: str = "a value") -> int:
    """The size of ``value``, charged to the render; over ``MAX_SIZE`` is an error."""
    tp = type(value)
    if tp is int or tp is float or tp is bool or value is None:
        return 1  # free: reading a number costs nothing worth counting
    size = len(value) if tp is str else _size(value)
    if size > MAX_SIZE:
        raise _over(what, size)
    _charge(size)
    return size


def _check_result(value: Any, what: str) -> None:
    """A freshly built value: strings by length, containers by their own item count."""
    if isinstance(value, str | bytes | list | tuple | dict):
        count = len(value)
        if count > MAX_SIZE:
            raise _over(what, count)
        _charge(count)


def _shallow(value: Any) -> None:
    """Charge a pass over the top level of ``value`` (what ``list``, ``map``, ... read)."""
    try:
        _charge(len(value) + 1)
    except TypeError:
        _charge(1)


# --- operators ---------------------------------------------------------------------------

_SEQUENCES = (str, bytes, list, tuple)
_NUMBERS = frozenset({int, float})


def _check_repeat(left: Any, right: Any) -> None:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, _SEQUENCES) and isinstance(times, int):
            built = _size(seq) * max(int(times), 0)
            if built > MAX_SIZE:
                kind = "characters" if isinstance(seq, str | bytes) else "items"
                raise _LimitError(
                    f"{_describe_value(seq)} * {times} would build {built:,} {kind}, over the "
                    f"template limit of {MAX_SIZE:,}"
                )
            _charge(built)
            return
    if isinstance(left, int) and isinstance(right, int):
        bits = int(left).bit_length() + int(right).bit_length()
        if bits > MAX_INT_BITS:
            raise _int_limit(bits)


def _int_limit(bits: float) -> _LimitError:
    return _LimitError(
        f"an integer of about {bits:,.0f} bits is over the template limit of {MAX_INT_BITS:,} bits"
    )


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = exponent * math.log2(abs(base))
        if bits > MAX_INT_BITS:
            raise _int_limit(bits)


def _check_add(left: Any, right: Any) -> None:
    if isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        built = _size(left) + _size(right)
        if built > MAX_SIZE:
            raise _over(f"{_describe_value(left)} + {_describe_value(right)}", built)
        _charge(built)


_PRINTF = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<precision>\*|\d+))?"
    r"[hlL]?(?P<conversion>.?)",
    re.DOTALL,
)


def _check_width(text: str | None, where: str) -> int:
    if text is None:
        return 0
    if text == "*":
        raise _LimitError(
            f"a '*' width in {where} is not allowed in templates; write the width as a number "
            f"(at most {MAX_FORMAT_WIDTH:,})"
        )
    if len(text) > 9 or int(text) > MAX_FORMAT_WIDTH:
        raise _LimitError(
            f"the width or precision {text} in {where} is over the template limit of "
            f"{MAX_FORMAT_WIDTH:,}"
        )
    return int(text)


def _check_printf(fmt: Any, args: Any) -> None:
    """Check a ``%`` format and its arguments before formatting: widths and the result size."""
    if not isinstance(fmt, str | bytes):
        return
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    positional = args if isinstance(args, tuple) else (args,)
    index = 0
    total = len(text)
    for match in _PRINTF.finditer(text):
        if match["conversion"] == "%" and match["key"] is None:
            continue
        width = _check_width(match["width"], "a % format")
        precision = _check_width(match["precision"], "a % format")
        key = match["key"]
        arg: Any = None
        if key is not None and isinstance(args, Mapping):
            arg = args.get(key)
        elif index < len(positional):
            arg = positional[index]
            index += 1
        total += max(width, precision) + _size(arg)
        if total > MAX_SIZE:
            raise _over("the % format", total)
    _charge(total)


def _check_percent(left: Any, right: Any) -> None:
    if isinstance(left, str | bytes):
        _check_printf(left, right)


_SPEC_NUMBER = re.compile(r"\d+")


class _Formatter(SandboxedFormatter):
    """``str.format`` in the sandbox, with format-spec widths and the result size bounded."""

    def __init__(self, env: Any, template: str) -> None:
        super().__init__(env)
        self._total = len(template)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        _checked(value, "a formatted value")
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> Any:
        for number in _SPEC_NUMBER.findall(format_spec):
            _check_width(number, f"the format spec {format_spec!r}")
        _checked(value, "a formatted value")
        text = super().format_field(value, format_spec)
        self._total += len(text)
        if self._total > MAX_SIZE:
            raise _over("str.format", self._total)
        return text


# --- methods, filters and globals that build big values from small arguments -------------


def _check_width_result(length: int, width: Any, what: str) -> None:
    if isinstance(width, int) and max(length, int(width)) > MAX_SIZE:
        raise _over(what, max(length, int(width)))


def _text_of(value: Any) -> str:
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


def _pre_replace(text: Any, old: Any, new: Any, count: Any = -1) -> None:
    size = _replaced_size(text, old, new, count)
    if size > MAX_SIZE:
        raise _over("replace", size)


def _joined(separator: Any, items: list[Any]) -> None:
    total = len(separator) * max(len(items) - 1, 0) if isinstance(separator, str | bytes) else 0
    for item in items:
        total += _size(item)
        if total > MAX_SIZE:
            raise _over("join", total)
    _charge(total)


def _method_check(method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Check a call of a builtin method that can build a big value; may return new args."""
    owner = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if isinstance(owner, str | bytes):
        if name in ("center", "ljust", "rjust", "zfill") and args:
            _check_width_result(len(owner), args[0], f"{name}({args[0]!r})")
        elif name == "expandtabs":
            tab = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(tab, int):
                tabs = owner.count("\t") if isinstance(owner, str) else owner.count(b"\t")
                size = len(owner) + tabs * tab
                if size > MAX_SIZE:
                    raise _over("expandtabs", size)
        elif name == "replace" and len(args) >= 2:
            _pre_replace(owner, *args[:3])
        elif name == "join" and args:
            items = list(args[0])
            _joined(owner, items)
            return (items, *args[1:])
        elif name == "translate" and args and isinstance(args[0], Mapping):
            longest = max(
                (len(v) if isinstance(v, str | bytes) else 1 for v in args[0].values()), default=1
            )
            if len(owner) * max(longest, 1) > MAX_SIZE:
                raise _over("translate", len(owner) * longest)
    elif isinstance(owner, int) and name == "to_bytes":
        length = args[0] if args else kwargs.get("length", 1)
        if isinstance(length, int) and length > MAX_SIZE:
            raise _over("int.to_bytes", length)
    return args


def _range(*args: Any) -> range:
    """``range`` for templates: at most ``MAX_RANGE`` numbers."""
    numbers = range(*args)
    try:
        count = len(numbers)
    except OverflowError:
        count = MAX_RANGE + 1
    if count > MAX_RANGE:
        raise _LimitError(
            f"range of {count:,} numbers is over the template limit of {MAX_RANGE:,}"
            if count <= 10**18
            else f"range is over the template limit of {MAX_RANGE:,} numbers"
        )
    return numbers


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """``lipsum`` for templates: at most ``MAX_LIPSUM_WORDS`` words."""
    words = n * (min if min > max else max) if isinstance(n, int) else 0
    if words > MAX_LIPSUM_WORDS:
        raise _LimitError(
            f"lipsum(n={n}, max={max}) could write {words:,} words, over the template limit "
            f"of {MAX_LIPSUM_WORDS:,}"
        )
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _loop(iterable: Iterable[Any]) -> Iterator[Any]:
    """Feed a ``{% for %}`` loop, one step per iteration."""
    budget = _BUDGET.get()
    if budget is None:
        yield from iterable
        return
    for item in iterable:
        budget.steps += 1
        if budget.steps > MAX_STEPS:
            raise _steps_exceeded()
        yield item


def _concat(*pieces: Any) -> str:
    """``a ~ b``: the pieces as text, checked before they are joined."""
    total = 0
    for piece in pieces:
        total += _size(piece)
        if total > MAX_SIZE:
            raise _over("the ~ concatenation", total)
    _charge(total)
    text = "".join([piece if type(piece) is str else str(piece) for piece in pieces])
    if len(text) > MAX_SIZE:
        raise _over("the ~ concatenation", len(text))
    return text


def _operand(value: Any) -> Any:
    """A comparison operand or dict key: comparing or hashing it walks it, so size it first."""
    _step(FILTER_STEPS // 2)
    _checked(value, "a compared value")
    return value


def _buffered(value: Any) -> Any:
    """Output written into a buffer (a macro, a call block, a filter block, a set block)."""
    text = _finalize(value)
    _emit(len(text))
    return text


_LOOP = _PREFIX + "loop"
_CONCAT = _PREFIX + "concat"
_OPERAND = _PREFIX + "operand"
_BUFFERED = _PREFIX + "buffered"
_INTERNAL_FILTERS: dict[str, Callable[..., Any]] = {
    _LOOP: _loop,
    _CONCAT: _concat,
    _OPERAND: _operand,
    _BUFFERED: _buffered,
}
"""The counting helpers ``_Bounder`` inserts; filters, so compiled code calls them directly."""


def _bounded_dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` for ``|tojson``: sized first, streamed with a cap when indented."""
    _checked(value, "a value given to tojson")
    indent = kwargs.get("indent")
    if indent is None:
        text = json.dumps(value, **kwargs)
    else:
        if isinstance(indent, int):
            _check_width(str(indent), "tojson(indent=...)")
        elif isinstance(indent, str) and len(indent) > MAX_FORMAT_WIDTH:
            _check_width(str(len(indent)), "tojson(indent=...)")
        total = 0
        chunks: list[str] = []
        for chunk in json.JSONEncoder(**kwargs).iterencode(value):
            total += len(chunk)
            if total > MAX_SIZE:
                raise _over("tojson", total)
            chunks.append(chunk)
        text = "".join(chunks)
    if len(text) > MAX_SIZE:
        raise _over("tojson", len(text))
    return text


# --- filters and tests -------------------------------------------------------------------

_SHALLOW_FILTERS = frozenset(
    {
        "attr", "batch", "count", "d", "default", "first", "items", "last", "length", "list",
        "map", "reject", "rejectattr", "reverse", "random", "select", "selectattr", "slice",
    }
)  # fmt: skip
"""Filters that only read the top level of their value (the rest may print or compare it)."""

_O1_FILTERS = frozenset({"attr", "count", "d", "default", "first", "length"})

_SHALLOW_TESTS = frozenset(
    {
        "boolean", "callable", "defined", "escaped", "false", "filter", "float", "integer",
        "iterable", "mapping", "none", "number", "sameas", "sequence", "string", "test",
        "true", "undefined",
    }
)  # fmt: skip


def _pre_center(value: Any, width: Any = 80, *_: Any, **__: Any) -> None:
    _check_width_result(len(_text_of(value)), width, f"center({width!r})")


def _pre_indent(value: Any, width: Any = 4, *_: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    text = _text_of(value)
    unit = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    size = len(text) + (text.count("\n") + 1) * max(unit, 0)
    if size > MAX_SIZE:
        raise _over(f"indent({width!r})", size)


def _pre_wordwrap(value: Any, width: Any = 79, *args: Any, **kwargs: Any) -> None:
    text = _text_of(value)
    wrap = kwargs.get("wrapstring", args[1] if len(args) > 1 else None)
    unit = len(wrap) if isinstance(wrap, str) else 1
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
    size = len(text) + lines * unit
    if size > MAX_SIZE:
        raise _over("wordwrap", size)


def _pre_replace_filter(value: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    _pre_replace(_text_of(value), old, new, -1 if count is None else count)


def _pre_format(value: Any, *args: Any, **kwargs: Any) -> None:
    _check_printf(_text_of(value), kwargs or args)


def _pre_batch(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if fill_with is not None and isinstance(linecount, int) and linecount > MAX_SIZE:
        raise _over(f"batch({linecount}) filled", linecount)


def _pre_slice(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    if isinstance(slices, int) and slices > MAX_RANGE:
        raise _LimitError(f"slice({slices:,}) is over the template limit of {MAX_RANGE:,} slices")


_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "batch": _pre_batch,
    "center": _pre_center,
    "format": _pre_format,
    "indent": _pre_indent,
    "replace": _pre_replace_filter,
    "slice": _pre_slice,
    "wordwrap": _pre_wordwrap,
}


@pass_eval_context
def _join_filter(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> str:
    """``|join``, with the joined size checked before joining."""
    items = list(value)
    _shallow(items)
    if attribute is not None:
        getter = make_attrgetter(eval_ctx.environment, attribute)
        items = [getter(item) for item in items]
    _joined(d, items)
    return str(d).join([_text_of(item) for item in items])


@pass_environment
def _sum_filter(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """``|sum``, linear for lists and tuples (``sum(start=[])`` flattens), sized as it goes."""
    if attribute is not None:
        getter = make_attrgetter(environment, attribute)
        items = [getter(item) for item in iterable]
    else:
        items = list(iterable)
    _shallow(items)
    if isinstance(start, list | tuple | str | bytes):
        total = _size(start)
        for item in items:
            if not isinstance(item, list | tuple if isinstance(start, list) else type(start)):
                raise TypeError(
                    f"can only add {type(start).__name__} (not {type(item).__name__!r}) to "
                    f"{type(start).__name__}"
                )
            total += _size(item)
            if total > MAX_SIZE:
                raise _over("sum", total)
        _charge(total)
        if isinstance(start, list):
            out: list[Any] = list(start)
            for item in items:
                out.extend(item)
            return out
        if isinstance(start, tuple):
            return tuple(x for part in (start, *items) for x in part)
        return start[:0].join([start, *items])  # type: ignore[list-item] # checked above
    return sum(items, start)


def _pprint_filter(value: Any) -> str:
    _checked(value, "a value given to pprint")
    return pprint.pformat(value, depth=_PPRINT_DEPTH)


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter: a step, its arguments sized and checked, its result checked."""
    from jinja2.utils import _PassArg

    offset = 0 if _PassArg.from_obj(fn) is None else 1
    shallow = name in _SHALLOW_FILTERS
    constant = name in _O1_FILTERS
    check = _FILTER_CHECKS.get(name)
    label = f"the {name} filter"

    what = f"a value given to {label}"

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.steps += FILTER_STEPS
            if budget.steps > MAX_STEPS:
                raise _steps_exceeded()
        own = args[offset:] if offset else args
        if own:
            if not shallow:
                _checked(own[0], what)
            elif not constant:
                _shallow(own[0])
            for arg in own[1:]:
                _checked(arg, what)
        for arg in kwargs.values():
            _checked(arg, what)
        if check is not None:
            check(*own, **kwargs)
        result = fn(*args, **kwargs)
        if type(result) is str:
            if len(result) > MAX_SIZE:
                raise _over(label, len(result))
        elif result is not None and type(result) is not int:
            _check_result(result, label)
        return result

    return guarded


def _guard_test(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a test: a step, and a deep size check unless it only looks at the surface."""
    from jinja2.utils import _PassArg

    offset = 0 if _PassArg.from_obj(fn) is None else 1
    shallow = name in _SHALLOW_TESTS

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _step(FILTER_STEPS)
        if not shallow:
            for arg in (*args[offset:], *kwargs.values()):
                _checked(arg, f"a value given to the {name} test")
        return fn(*args, **kwargs)

    return guarded


# --- strict undefined --------------------------------------------------------------------


def _shown(name: Any) -> str:
    text = str(name)
    if text.startswith(_PREFIX):
        return "$" + text[len(_PREFIX) :]
    return repr(name)


def _undefined_message(hint: str | None, obj: Any, name: Any) -> str:
    """Say what is missing and what is there instead (keys, list length, close matches)."""
    if hint:
        return hint.replace(_PREFIX, "$")
    if obj is missing:
        return f"{_shown(name)} is undefined"
    if isinstance(obj, Mapping):
        try:
            keys = [k for k in obj if isinstance(k, str)]
        except Exception:  # noqa: BLE001 - a lazy mapping that cannot list itself
            keys = []
        shown = ", ".join(keys[:20]) + (f", ... ({len(keys) - 20} more)" if len(keys) > 20 else "")
        message = f"no key {name!r} here; " + (f"the keys are: {shown}" if keys else "it is empty")
        close = difflib.get_close_matches(str(name), keys, n=1)
        output = obj.get("output") if "output" in keys else None
        if isinstance(output, Mapping) and name in output:
            message += f" (a node's record holds its output: write .output.{name})"
        elif close:
            message += f" (did you mean {close[0]!r}?)"
        return message
    if isinstance(obj, list | tuple) and isinstance(name, int):
        return f"no item [{name}]: the list has {len(obj)} item(s)"
    if obj is None:
        return f"cannot read {name!r} of null (None)"
    return f"{type(obj).__name__} value has no attribute or item {name!r}"


class _Undefined(StrictUndefined):
    """Strict undefined: any use fails, with a message listing what is there."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        return _undefined_message(self._undefined_hint, self._undefined_obj, self._undefined_name)


# --- the Jinja environment ---------------------------------------------------------------


def _finalize(value: Any) -> Any:
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
        _checked(value, "a rendered value")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    if isinstance(value, Undefined):
        return str(value)  # raises, with the message of the undefined
    if not isinstance(value, str | int | float):
        _checked(value, "a rendered value")
    return str(value)


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, bounded, with dict keys winning over dict methods and unsafe access raising."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=_Undefined, finalize=_finalize, autoescape=False)
        self.globals["range"] = _range
        self.globals["lipsum"] = _lipsum
        filters = dict(self.filters)
        filters.update(join=_join_filter, sum=_sum_filter, pprint=_pprint_filter)
        self.filters = {name: _guard_filter(name, fn) for name, fn in filters.items()}
        tests = cast("dict[str, Callable[..., Any]]", self.tests)
        self.tests = {name: _guard_test(name, fn) for name, fn in tests.items()}
        self.filters.update(_INTERNAL_FILTERS)
        self.policies["json.dumps_function"] = _bounded_dumps

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Read ``obj.attribute``: a mapping's key first (so ``.items`` finds a key "items")."""
        _step()
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """Read ``obj[argument]``; a container key is sized first (hashing walks it)."""
        _step()
        if not isinstance(argument, str | int):
            _checked(argument, "a key")
        return super().getitem(obj, argument)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        """Raise at once: a blocked attribute must fail loudly, not render as ``""``."""
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``**``, ``+`` and ``%``, checked before they allocate."""
        budget = _BUDGET.get()
        if budget is not None:
            budget.steps += 1
            if budget.steps > MAX_STEPS:
                raise _steps_exceeded()
        if type(left) in _NUMBERS and type(right) in _NUMBERS:
            if operator == "*" and type(left) is int and type(right) is int:
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise _int_limit(left.bit_length() + right.bit_length())
            elif operator == "**":
                _check_power(left, right)
            return self.binop_table[operator](left, right)
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "+":
            _check_add(left, right)
        elif operator == "**":
            _check_power(left, right)
        else:
            _check_percent(left, right)
        result = self.binop_table[operator](left, right)
        if operator == "%" and isinstance(result, str | bytes) and len(result) > MAX_SIZE:
            raise _over("the % format", len(result))
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``str.format`` / ``format_map`` through the bounded formatter."""
        name = getattr(value, "__name__", None)
        owner = getattr(value, "__self__", None)
        if name not in ("format", "format_map") or not isinstance(owner, str):
            return None
        env = self

        def format_(*args: Any, **kwargs: Any) -> str:
            if name == "format_map":
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one positional argument")
                kwargs, args = args[0], ()
            return _Formatter(env, owner).vformat(owner, args, kwargs)

        return functools.update_wrapper(format_, value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Call from a template: ``CALL_STEPS`` steps, arguments sized, growers checked first."""
        budget = _BUDGET.get()
        if budget is not None:
            budget.steps += CALL_STEPS
            if budget.steps > MAX_STEPS:
                raise _steps_exceeded()
        if isinstance(__obj, Macro):
            for arg in args:
                _shallow(arg)
            return super().call(__context, __obj, *args, **kwargs)
        if isinstance(__obj, LoopContext) and args:
            args = (_loop(args[0]), *args[1:])
            return super().call(__context, __obj, *args, **kwargs)
        for arg in args:
            _checked(arg, "an argument")
        for key, arg in kwargs.items():
            if key not in ("_loop_vars", "_block_vars", "caller"):
                _checked(arg, "an argument")
        args = _method_check(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        _check_result(result, f"{getattr(__obj, '__name__', 'the call')}(...)")
        return result


_ENV = _Environment()
_GLOBALS = frozenset(_ENV.globals)


# --- bounding a parsed template ----------------------------------------------------------


def _helper(name: str, first: nodes.Node, *rest: nodes.Node, lineno: int) -> nodes.Filter:
    """A call of one of the internal filters (``_INTERNAL_FILTERS``): a direct call, no sandbox."""
    return nodes.Filter(first, name, list(rest), [], None, None, lineno=lineno)


class _Bounder(NodeTransformer):
    """Route what Jinja runs natively through the counting helpers of ``_Environment``.

    Loops step per iteration; ``~`` is sized before it joins; comparison operands and dict
    keys are sized (comparing and hashing walk them); output written into a buffer
    (macros, call/filter/set blocks, blocks) is counted as it is written. Output at the
    top level is counted where the render is consumed.
    """

    def __init__(self) -> None:
        self.buffered = 0

    def _buffer(self, node: nodes.Node) -> nodes.Node:
        self.buffered += 1
        try:
            return self.generic_visit(node)
        finally:
            self.buffered -= 1

    # Jinja's visitor dispatches on the node class name: ``visit_<NodeClass>``
    visit_Macro = visit_CallBlock = visit_FilterBlock = _buffer  # noqa: N815
    visit_AssignBlock = visit_Block = _buffer  # noqa: N815

    def visit_Output(self, node: nodes.Output) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        if self.buffered:
            node.nodes = [_helper(_BUFFERED, child, lineno=child.lineno) for child in node.nodes]
        return node

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.iter = _helper(_LOOP, node.iter, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        return _helper(_CONCAT, *node.nodes, lineno=node.lineno)

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.expr = _sized(node.expr)
        for operand in node.ops:
            operand.expr = _sized(operand.expr)
        return node

    def visit_Pair(self, node: nodes.Pair) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.key = _sized(node.key)
        return node


def _sized(expr: nodes.Expr) -> nodes.Expr:
    if isinstance(expr, nodes.Const):
        return expr
    return _helper(_OPERAND, expr, lineno=expr.lineno)


def _bounded(tree: nodes.Template) -> nodes.Template:
    bounded = _Bounder().visit(tree)
    assert isinstance(bounded, nodes.Template)
    return bounded


# --- rewriting ``$name`` -----------------------------------------------------------------

_OPENERS = ("{{", "{%", "{#")
_CLOSERS = {"{{": "}}", "{%": "%}", "{#": "#}"}
_ENDRAW = re.compile(r"\{%[-+]?\s*endraw\s*[-+]?%\}")


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch == "_"


def _rewrite_code(text: str, start: int, closer: str | None) -> tuple[str, int]:
    """Rewrite ``$name`` in code from ``start`` up to ``closer`` (or the end), skipping strings.

    Returns the rewritten code and the index of the closer (``len(text)`` if none).
    """
    out: list[str] = []
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if closer is not None and ch == closer[0] and text.startswith(closer, i):
            break
        if ch in "'\"":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif ch == "$" and i + 1 < n and _is_ident_start(text[i + 1]):
            j = i + 2
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(_PREFIX + text[i + 1 : j])
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out), min(i, n)


def _rewrite_template(text: str) -> tuple[str, str | None]:
    """Rewrite ``$name`` in every block of a template.

    Returns the rewritten text and, when the text is exactly one ``{{ expr }}`` with
    only whitespace around it, the rewritten ``expr`` (whitespace-control marks removed).
    """
    out: list[str] = []
    expressions: list[str] = []
    other_blocks = False
    loose_text = False
    i = 0
    n = len(text)
    while i < n:
        starts = [j for j in (text.find(o, i) for o in _OPENERS) if j >= 0]
        if not starts:
            out.append(text[i:])
            loose_text = loose_text or bool(text[i:].strip())
            break
        j = min(starts)
        out.append(text[i:j])
        loose_text = loose_text or bool(text[i:j].strip())
        opener = text[j : j + 2]
        closer = _CLOSERS[opener]
        if opener == "{#":
            k = text.find(closer, j + 2)
            k = n if k < 0 else k + 2
            out.append(text[j:k])
            other_blocks = True
            i = k
            continue
        code, k = _rewrite_code(text, j + 2, closer)
        out.append(opener + code + text[k : k + 2])
        i = k + 2
        if opener == "{{" and k < n:
            expressions.append(code)
        else:
            other_blocks = True
        if opener == "{%" and code.strip(" \t\r\n-+") == "raw":
            end = _ENDRAW.search(text, i)
            stop = n if end is None else end.end()
            out.append(text[i:stop])
            i = stop
    single = None
    if len(expressions) == 1 and not other_blocks and not loose_text:
        single = expressions[0]
        if single[:1] in "-+":
            single = single[1:]
        if single[-1:] in "-+":
            single = single[:-1]
    return "".join(out), single


# --- compiled forms ----------------------------------------------------------------------

_PATH = re.compile(
    r"\s*" + _PREFIX + r"([A-Za-z_]\w*)"
    r"((?:\s*\.\s*[A-Za-z_]\w*|\s*\[\s*(?:\d+|\"[^\"\\]*\"|'[^'\\]*')\s*\])*)\s*",
)
_STEP = re.compile(
    r"\.\s*([A-Za-z_]\w*)|\[\s*(\d+)\s*\]|\[\s*\"([^\"\\]*)\"\s*\]|\[\s*'([^'\\]*)'\s*\]"
)
_MISSING = object()

_Names = tuple[tuple[str, ...], tuple[str, ...]]
"""What a template may name: scope roots (written ``$root``) and bare names."""

_PARAM_NAMES: _Names = (ROOTS, ())


def _check_names(found: set[str], names: _Names) -> None:
    """Refuse free names that are neither scope roots, allowed bare names nor Jinja globals."""
    roots, bare = names
    params = names == _PARAM_NAMES
    allowed = [f"${r}" for r in roots] + list(bare)
    allowed_text = _ROOTS_TEXT if params else ", ".join(allowed)
    for name in sorted(found):
        if name.startswith(_PREFIX):
            root = name[len(_PREFIX) :]
            if root in roots:
                continue
            close = difflib.get_close_matches(f"${root}", allowed, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            what = "unknown root" if params else "unknown name"
            raise _CompileError(f"{what} ${root}{guess}; use one of {allowed_text}")
        if name in _GLOBALS or name in bare:
            continue
        if params:
            raise _CompileError(
                f"unknown name {name!r}; scope roots start with '$' ({allowed_text}), "
                f"e.g. $input.main.{name}"
            )
        close = difflib.get_close_matches(name, [*bare, *(f"${r}" for r in roots)], n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        raise _CompileError(
            f"unknown name {name!r}: {guess}a retry condition sees only {allowed_text}; a value "
            f"the action reported is in the error's details, e.g. "
            f"'{{{{ $error.details.{name} }}}}'"
        )


def _syntax_message(exc: TemplateSyntaxError, source: str) -> str:
    shown = source.strip().replace(_PREFIX, "$")
    return f"template syntax error in {shown!r}: {exc.message}".replace(_PREFIX, "$")


class _Expression:
    """One ``{{ expr }}`` keeping its native type; a plain path skips Jinja when it can."""

    __slots__ = ("_path", "_root", "_template")

    def __init__(self, source: str, names: _Names = _PARAM_NAMES) -> None:
        try:
            parser = Parser(_ENV, source, state="variable")
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError(
                    f"unexpected {parser.stream.current.value!r} after the expression",
                    parser.stream.current.lineno,
                )
        except TemplateSyntaxError as exc:
            raise _CompileError(_syntax_message(exc, source)) from None
        found = [expr] if isinstance(expr, nodes.Name) else list(expr.find_all(nodes.Name))
        _check_names({n.name for n in found if n.ctx == "load"}, names)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        tree = _bounded(nodes.Template(body, lineno=1))
        tree.set_environment(_ENV)
        self._template = _ENV.from_string(tree)
        self._root = ""
        self._path: tuple[str | int, ...] = ()
        match = _PATH.fullmatch(source)
        if match is not None:
            self._root = _PREFIX + match.group(1)
            steps: list[str | int] = []
            for step in _STEP.finditer(match.group(2)):
                attr, index, dq, sq = step.groups()
                steps.append(int(index) if index is not None else (attr or dq or sq or ""))
            self._path = tuple(steps)

    def __call__(self, context: dict[str, Any]) -> Any:
        if self._root:
            value = self._walk(context)
            if value is not _MISSING:
                return value
        ctx = self._template.new_context(context, shared=True)
        consume(self._template.root_render_func(ctx))
        result = ctx.vars["result"]
        if isinstance(result, Undefined):
            result._fail_with_undefined_error()
        _emit(_checked(result, "the value of the template"))
        return result

    def _walk(self, context: dict[str, Any]) -> Any:
        """Follow a plain path through dicts and lists; ``_MISSING`` means ask Jinja."""
        value: Any = context.get(self._root, _MISSING)
        if value is _MISSING:
            return _MISSING
        for step in self._path:
            if isinstance(step, str):
                if type(value) is dict:
                    if step not in value:
                        return _MISSING
                    value = value[step]
                elif isinstance(value, Mapping):
                    try:
                        value = value[step]
                    except KeyError:
                        return _MISSING
                else:
                    return _MISSING
            elif type(value) in (list, tuple) and step < len(value):
                value = value[step]
            else:
                return _MISSING
        return value


class _Text:
    """Text mixed with ``{{ }}`` / ``{% %}``, rendered to a string."""

    __slots__ = ("_template",)

    def __init__(self, source: str, names: _Names = _PARAM_NAMES) -> None:
        try:
            tree = _ENV.parse(source)
        except TemplateSyntaxError as exc:
            raise _CompileError(_syntax_message(exc, source)) from None
        _check_names(meta.find_undeclared_variables(tree), names)
        self._template = _ENV.from_string(_bounded(tree))

    def __call__(self, context: dict[str, Any]) -> Any:
        template = self._template
        total = 0
        parts: list[str] = []
        for piece in template.root_render_func(template.new_context(context, shared=True)):
            total += len(piece)
            if total > MAX_SIZE:
                raise _LimitError(
                    f"the rendered text would pass {MAX_SIZE:,} characters, the template limit"
                )
            parts.append(piece)
        _emit(total)
        return "".join(parts)


_Compiled = _Expression | _Text


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_string(text: str, names: _Names = _PARAM_NAMES) -> _Compiled:
    """Compile one template string (cached by its text and the names it may use)."""
    rewritten, single = _rewrite_template(text)
    if single is not None:
        return _Expression(single, names)
    return _Text(rewritten, names)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_condition(text: str, names: _Names = _PARAM_NAMES) -> _Compiled:
    """Compile a condition: a template string, or a bare expression (cached by its text)."""
    if "{{" in text or "{%" in text:
        return _compile_string(text, names)
    code, _ = _rewrite_code(text, 0, None)
    return _Expression(code, names)


def _context(scope: Mapping[str, Any]) -> dict[str, Any]:
    """The Jinja variables for a scope: the globals, then each root under its internal name.

    Templates get this dict as a shared context (no copy per template), so it holds the
    globals too.
    """
    context = dict(_ENV.globals)
    for key, value in scope.items():
        context[_PREFIX + key] = value
    return context


def _describe(exc: Exception) -> str:
    text = str(exc).replace(_PREFIX, "$")
    if isinstance(exc, SecurityError):
        return f"blocked by the template sandbox: {text}"
    if isinstance(exc, _LimitError):
        return text
    if isinstance(exc, UndefinedError):
        return f"undefined: {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- params ------------------------------------------------------------------------------


class _StringPart:
    """One template string at a known param path; failures become ``TemplateError``."""

    __slots__ = ("_compiled", "_path")

    def __init__(self, compiled: _Compiled, path: str) -> None:
        self._compiled = compiled
        self._path = path

    def render(self, context: dict[str, Any]) -> Any:
        try:
            return self._compiled(context)
        except Exception as exc:
            raise TemplateError(self._path, _describe(exc)) from exc


class _DictPart:
    """A mapping with templates below it: rendered into a new dict."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[Any, _Part | None, Any]]) -> None:
        self._items = items

    def render(self, context: dict[str, Any]) -> Any:
        return {
            key: value if part is None else part.render(context) for key, part, value in self._items
        }


class _ListPart:
    """A list or tuple with templates below it: rendered into a new list."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[_Part | None, Any]]) -> None:
        self._items = items

    def render(self, context: dict[str, Any]) -> Any:
        return [value if part is None else part.render(context) for part, value in self._items]


_Part = _StringPart | _DictPart | _ListPart


def _join(path: str, key: Any) -> str:
    return str(key) if not path else f"{path}.{key}"


def _build(value: Any, path: str) -> _Part | None:
    """The renderer for ``value``, or ``None`` when it holds no template."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return None
        try:
            compiled = _compile_string(value)
        except _CompileError as exc:
            raise TemplateError(path or "(params)", str(exc)) from None
        return _StringPart(compiled, path or "(params)")
    if isinstance(value, Mapping):
        items = [(k, _build(v, _join(path, k)), v) for k, v in value.items()]
        if all(part is None for _, part, _ in items):
            return None
        return _DictPart(items)
    if isinstance(value, list | tuple):
        parts = [(_build(v, f"{path}[{i}]"), v) for i, v in enumerate(value)]
        if all(part is None for part, _ in parts):
            return None
        return _ListPart(parts)
    return None


class CompiledParams:
    """A params structure with its templates compiled; ``render(scope)`` evaluates them."""

    __slots__ = ("_root",)

    def __init__(self, root: _Part) -> None:
        self._root = root

    def render(self, scope: Mapping[str, Any]) -> Any:
        """A new structure with every template evaluated against ``scope``.

        Mappings come back as dicts and tuples as lists wherever a template sits below
        them; untemplated parts are the original objects. All the templates of one call
        share one budget (``MAX_STEPS``, ``MAX_WORK``, ``MAX_SIZE`` rendered).
        """
        token = _BUDGET.set(_Budget())
        try:
            return self._root.render(_context(scope))
        finally:
            _BUDGET.reset(token)


def compile_params(params: Any) -> CompiledParams | None:
    """Compile every template in ``params``; ``None`` when there are none (pass it as is).

    Raises ``TemplateError`` naming the param path when a template does not compile.
    """
    root = _build(params, "")
    return None if root is None else CompiledParams(root)


def _render_one(compiled: _Compiled, path: str, context: dict[str, Any]) -> Any:
    token = _BUDGET.set(_Budget())
    try:
        return _StringPart(compiled, path).render(context)
    finally:
        _BUDGET.reset(token)


def evaluate(
    text: Any,
    scope: Mapping[str, Any],
    *,
    path: str = "condition",
    names: Mapping[str, Any] | None = None,
) -> Any:
    """Evaluate a condition, ``"{{ expr }}"`` or a bare ``"expr"``, to its native value.

    A value that is not a string is returned as it is (a condition may be a plain bool).
    Its roots are the keys of ``scope`` (a retry condition sees ``$error``, ``$attempt``...);
    ``names`` are names written without ``$`` (NoETL's ``status_code``, ``error``, ...).
    """
    if not isinstance(text, str):
        return text
    roots = ROOTS if scope.keys() <= _ROOT_SET else tuple(sorted(scope))
    bare = tuple(sorted(names)) if names else ()
    try:
        compiled = _compile_condition(text, (roots, bare))
    except _CompileError as exc:
        raise TemplateError(path, str(exc)) from None
    context = _context(scope)
    if names:
        context.update(names)
    return _render_one(compiled, path, context)


def check_condition(
    text: Any, *, roots: Iterable[str], bare: Iterable[str] = (), path: str = "condition"
) -> None:
    """Compile a condition that may name ``$root`` for each of ``roots`` and the ``bare``
    names; raise ``TemplateError`` naming ``path`` if it does not compile.

    Run at validation, so a misspelt or unknown name is an error before anything runs
    rather than a condition that silently never holds.
    """
    if not isinstance(text, str):
        return
    try:
        _compile_condition(text, (tuple(sorted(roots)), tuple(sorted(bare))))
    except _CompileError as exc:
        raise TemplateError(path, str(exc)) from None
