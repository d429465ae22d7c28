"""The sandboxed Jinja environment, with the limits wired into its hooks.

``ENV`` is Jinja's ``ImmutableSandboxedEnvironment`` (no ``_``-prefixed attributes, no
mutating methods) whose hooks call the checks of ``prana._template_limits``: intercepted
operators, ``call``, ``getattr``/``getitem``, every filter and test wrapped to charge its
step and size its arguments and result, bounded globals (``range``, ``lipsum``), the
finalize hook and the JSON policy. ``bounded`` rewrites a parsed template so that what
Jinja runs natively (loops, ``~``, comparisons, dict keys, buffered output) goes through
the counting helpers too. Undefined is strict, with a message listing what is there.
"""

from __future__ import annotations

import difflib
import functools
import pprint
from collections.abc import Callable, Mapping
from typing import Any, cast

from jinja2 import StrictUndefined, Undefined, nodes, pass_environment, pass_eval_context
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.filters import make_attrgetter
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing
from jinja2.visitor import NodeTransformer

from prana._template_limits import (
    BUDGET,
    BUFFERED,
    CALL_STEPS,
    CONCAT,
    FILTER_STEPS,
    INTERNAL_FILTERS,
    LOOP,
    MAX_INT_BITS,
    MAX_RANGE,
    MAX_SIZE,
    MAX_STEPS,
    NUMBERS,
    OPERAND,
    ORDERED,
    PLAIN,
    PPRINT_DEPTH,
    PREFIX,
    SLICED,
    Formatter,
    LimitError,
    NotAValueError,
    bounded_dumps,
    charge,
    check_add,
    check_percent,
    check_power,
    check_printf,
    check_repeat,
    check_result,
    check_width_result,
    checked,
    counted,
    finalize,
    int_limit,
    joined,
    method_check,
    over,
    pre_replace,
    refuse_in_text,
    shallow,
    size_of,
    step,
    steps_exceeded,
    template_lipsum,
    template_range,
    text_of,
)

# --- filters and tests -------------------------------------------------------------------

_SHALLOW_FILTERS = frozenset(
    {
        "attr", "batch", "count", "d", "default", "first", "items", "last", "length", "list",
        "map", "reject", "rejectattr", "reverse", "random", "select", "selectattr", "slice",
    }
)  # fmt: skip
"""Filters that only read the top level of their value (the rest may print or compare it)."""

_O1_FILTERS = frozenset({"attr", "count", "d", "default", "first", "length"})

_PASSING_FILTERS = frozenset(
    {
        "attr", "batch", "count", "d", "default", "dictsort", "first", "groupby", "items",
        "join", "last", "length", "list", "map", "max", "min", "random", "reject",
        "rejectattr", "reverse", "select", "selectattr", "slice", "sort", "sum", "unique",
    }
)  # fmt: skip
"""Filters whose value may be an iterator or hold a method: they pass items along (what
they give is checked where it is used), or read a length; ``join`` checks the items it
writes. Every other filter writes its value as text or reads it as a number, so its value,
like every filter's arguments, goes through ``refuse_in_text`` first."""

_SHALLOW_TESTS = frozenset(
    {
        "boolean", "callable", "defined", "escaped", "false", "filter", "float", "integer",
        "iterable", "mapping", "none", "number", "sameas", "sequence", "string", "test",
        "true", "undefined",
    }
)  # fmt: skip


def _pre_center(value: Any, width: Any = 80, *_: Any, **__: Any) -> None:
    check_width_result(len(text_of(value)), width, f"center({width!r})")


def _pre_indent(value: Any, width: Any = 4, *_: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    text = text_of(value)
    unit = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    size = len(text) + (text.count("\n") + 1) * max(unit, 0)
    if size > MAX_SIZE:
        raise over(f"indent({width!r})", size)


def _pre_wordwrap(value: Any, width: Any = 79, *args: Any, **kwargs: Any) -> None:
    text = text_of(value)
    wrap = kwargs.get("wrapstring", args[1] if len(args) > 1 else None)
    unit = len(wrap) if isinstance(wrap, str) else 1
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
    size = len(text) + lines * unit
    if size > MAX_SIZE:
        raise over("wordwrap", size)


def _pre_replace_filter(value: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    pre_replace(text_of(value), old, new, -1 if count is None else count)


def _pre_format(value: Any, *args: Any, **kwargs: Any) -> None:
    check_printf(text_of(value), kwargs or args)


def _pre_batch(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if fill_with is not None and isinstance(linecount, int) and linecount > MAX_SIZE:
        raise over(f"batch({linecount}) filled", linecount)


def _pre_slice(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    if isinstance(slices, int) and slices > MAX_RANGE:
        raise LimitError(f"slice({slices:,}) is over the template limit of {MAX_RANGE:,} slices")


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
    shallow(items)
    if attribute is not None:
        getter = make_attrgetter(eval_ctx.environment, attribute)
        items = [getter(item) for item in items]
    joined(d, items)
    for item in items:
        if type(item) not in PLAIN:
            refuse_in_text(item)
    return str(d).join([text_of(item) for item in items])


@pass_environment
def _sum_filter(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """``|sum``, linear for lists and tuples (``sum(start=[])`` flattens), sized as it goes."""
    if attribute is not None:
        getter = make_attrgetter(environment, attribute)
        items = [getter(item) for item in iterable]
    else:
        items = list(iterable)
    shallow(items)
    if isinstance(start, list | tuple | str | bytes):
        total = size_of(start)
        for item in items:
            if not isinstance(item, list | tuple if isinstance(start, list) else type(start)):
                raise TypeError(
                    f"can only add {type(start).__name__} (not {type(item).__name__!r}) to "
                    f"{type(start).__name__}"
                )
            total += size_of(item)
            if total > MAX_SIZE:
                raise over("sum", total)
        charge(total)
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
    checked(value, "a value given to pprint")
    return pprint.pformat(value, depth=PPRINT_DEPTH)


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter: a step, its arguments sized and checked, its result checked."""
    from jinja2.utils import _PassArg

    offset = 0 if _PassArg.from_obj(fn) is None else 1
    top_only = name in _SHALLOW_FILTERS
    constant = name in _O1_FILTERS
    writes_value = name not in _PASSING_FILTERS
    check = _FILTER_CHECKS.get(name)
    label = f"the {name} filter"

    what = f"a value given to {label}"

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = BUDGET.get()
        if budget is not None:
            budget.steps += FILTER_STEPS
            if budget.steps > MAX_STEPS:
                raise steps_exceeded()
        own = args[offset:] if offset else args
        if own:
            if not top_only:
                checked(own[0], what)
            elif not constant:
                shallow(own[0])
            if writes_value and type(own[0]) is not str:
                refuse_in_text(own[0])
            for arg in own[1:]:
                checked(arg, what)
                refuse_in_text(arg)
        for arg in kwargs.values():
            checked(arg, what)
            refuse_in_text(arg)
        if check is not None:
            check(*own, **kwargs)
        result = fn(*args, **kwargs)
        if type(result) is str:
            if len(result) > MAX_SIZE:
                raise over(label, len(result))
        elif result is not None:
            check_result(result, label)
        return result

    return guarded


def _guard_test(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a test: a step, and a deep size check unless it only looks at the surface."""
    from jinja2.utils import _PassArg

    offset = 0 if _PassArg.from_obj(fn) is None else 1
    top_only = name in _SHALLOW_TESTS

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        step(FILTER_STEPS)
        if not top_only:
            for arg in (*args[offset:], *kwargs.values()):
                checked(arg, f"a value given to the {name} test")
        return fn(*args, **kwargs)

    return guarded


# --- strict undefined --------------------------------------------------------------------


class _Unnamed(str):
    """A key that is not data (``$input.main[range]``), shown by its type in a message."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<a {self}>"


def _shown(name: Any) -> str:
    text = str(name)
    if text.startswith(PREFIX):
        return "$" + text[len(PREFIX) :]
    return repr(name)


def _undefined_message(hint: str | None, obj: Any, name: Any) -> str:
    """Say what is missing and what is there instead (keys, list length, close matches)."""
    try:
        refuse_in_text(name)
    except (NotAValueError, UndefinedError):  # a key that is not data: its repr has an address
        name = _Unnamed(type(name).__name__)
    if hint:
        return hint.replace(PREFIX, "$")
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


class _MethodUndefined(_Undefined):
    """A mapping's method, reached by a name that is not one of its keys.

    The rule: a name on a mapping reads data. Without that key (``$input.main.items`` on
    data without ``items``) it is undefined like any missing key: ``| default`` and
    ``is defined`` see it missing, and its use fails listing the keys. Only a call reaches
    the method (``.items()``): ``_Environment.call`` calls ``method`` in its place, or
    raises ``blocked`` for a method the sandbox refuses (``.pop``, ``.update``).
    """

    __slots__ = ("blocked", "method")

    def __init__(self, method: Callable[..., Any] | None, blocked: str, obj: Any, name: str):
        super().__init__(obj=obj, name=name)
        self.method = method
        self.blocked = blocked

    @property
    def _undefined_message(self) -> str:
        message = _undefined_message(None, self._undefined_obj, self._undefined_name)
        if self.method is None:
            return message
        owner = type(self._undefined_obj).__name__
        return f"{message} ({self._undefined_name}() calls the {owner}'s method)"


def _mapping_name(obj: Mapping[Any, Any], name: str, read: Callable[[Any, Any], Any]) -> Any:
    """What ``read`` (the sandbox's getattr or getitem) gives for a name ``obj`` has no key
    for, a method of ``obj`` (safe or blocked) as ``_MethodUndefined``."""
    try:
        found = read(obj, name)
    except SecurityError as exc:
        if name.startswith("_") or not callable(getattr(type(obj), name, None)):
            raise
        return _MethodUndefined(None, str(exc), obj, name)
    if callable(found) and getattr(found, "__self__", None) is obj:
        return _MethodUndefined(found, "", obj, name)
    return found


# --- the Jinja environment ---------------------------------------------------------------


def _raw_str_format(obj: Any) -> bool:
    """Whether ``obj`` is ``str.format``/``format_map`` itself (bound or not), not the bounded
    wrapper ``wrap_str_format`` gives: its fields read any attribute, ``_`` ones included."""
    if getattr(obj, "__name__", None) not in _STR_FORMATS:
        return False
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, str):
        return True
    cls = getattr(obj, "__objclass__", None)  # str.format, unbound
    return isinstance(cls, type) and issubclass(cls, str)


_STR_FORMATS = frozenset({"format", "format_map"})


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, bounded, with dict keys winning over dict methods and unsafe access raising."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=_Undefined, finalize=finalize, autoescape=False)
        self.globals["range"] = template_range
        self.globals["lipsum"] = template_lipsum
        filters = dict(self.filters)
        filters.update(join=_join_filter, sum=_sum_filter, pprint=_pprint_filter)
        self.filters = {name: _guard_filter(name, fn) for name, fn in filters.items()}
        tests = cast("dict[str, Callable[..., Any]]", self.tests)
        self.tests = {name: _guard_test(name, fn) for name, fn in tests.items()}
        self.filters.update(INTERNAL_FILTERS)
        self.policies["json.dumps_function"] = bounded_dumps

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Read ``obj.attribute``: a mapping's key first (so ``.items`` finds a key "items")."""
        step()
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
            return _mapping_name(obj, attribute, super().getattr)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        """Read ``obj[argument]``; a container key is sized first (hashing walks it)."""
        step()
        if not isinstance(argument, str | int):
            checked(argument, "a key")
        if isinstance(obj, Mapping) and isinstance(argument, str):
            return _mapping_name(obj, argument, super().getitem)
        return super().getitem(obj, argument)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        """Raise at once: a blocked attribute must fail loudly, not render as ``""``."""
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        """``*``, ``**``, ``+`` and ``%``, checked before they allocate."""
        budget = BUDGET.get()
        if budget is not None:
            budget.steps += 1
            if budget.steps > MAX_STEPS:
                raise steps_exceeded()
        if type(left) in NUMBERS and type(right) in NUMBERS:
            if operator == "*" and type(left) is int and type(right) is int:
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise int_limit(left.bit_length() + right.bit_length())
            elif operator == "**":
                check_power(left, right)
            return self.binop_table[operator](left, right)
        if operator == "*":
            check_repeat(left, right)
        elif operator == "+":
            check_add(left, right)
        elif operator == "**":
            check_power(left, right)
        else:
            check_percent(left, right)
        result = self.binop_table[operator](left, right)
        if operator == "%" and isinstance(result, str | bytes) and len(result) > MAX_SIZE:
            raise over("the % format", len(result))
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
            return Formatter(env, owner).vformat(owner, args, kwargs)

        return functools.update_wrapper(format_, value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Call from a template: ``CALL_STEPS`` steps, arguments sized, growers checked first."""
        budget = BUDGET.get()
        if budget is not None:
            budget.steps += CALL_STEPS
            if budget.steps > MAX_STEPS:
                raise steps_exceeded()
        if isinstance(__obj, _MethodUndefined):
            if __obj.method is None:
                raise SecurityError(__obj.blocked)
            __obj = __obj.method
        if _raw_str_format(__obj):
            raise SecurityError(
                f"str.{__obj.__name__} reached a call without the sandbox's formatter "
                f"(as Jinja 3.1.5's |attr handed it out); use '...'.{__obj.__name__}(...) "
                "or the format filter"
            )
        if isinstance(__obj, Macro):
            for arg in args:
                shallow(arg)
            return super().call(__context, __obj, *args, **kwargs)
        if isinstance(__obj, LoopContext) and args:
            args = (counted(args[0]), *args[1:])
            return super().call(__context, __obj, *args, **kwargs)
        for arg in args:
            checked(arg, "an argument")
        for key, arg in kwargs.items():
            if key not in ("_loop_vars", "_block_vars", "caller"):
                checked(arg, "an argument")
        args = method_check(__obj, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        check_result(result, f"{getattr(__obj, '__name__', 'the call')}(...)")
        return result


ENV = _Environment()
GLOBALS = frozenset(ENV.globals)


# --- bounding a parsed template ----------------------------------------------------------


def _helper(name: str, first: nodes.Node, *rest: nodes.Node, lineno: int) -> nodes.Filter:
    """A call of one of the internal filters (``INTERNAL_FILTERS``): a direct call, no sandbox."""
    return nodes.Filter(first, name, list(rest), [], None, None, lineno=lineno)


class _Bounder(NodeTransformer):
    """Route what Jinja runs natively through the counting helpers of ``_Environment``.

    Loops step per iteration; ``~`` is sized before it joins; a slice (which Jinja
    compiles natively, past ``getitem``) is charged what it copies; comparison operands and dict
    keys are sized (comparing and hashing walk them); output written into a buffer
    (macros, call/filter/set blocks, blocks) is counted as it is written. Output at the
    top level is counted where the render is consumed. In a retry condition
    (``condition``), an ordering comparison with None on either side is false.
    """

    def __init__(self, condition: bool = False) -> None:
        self.buffered = 0
        self.condition = condition

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
            node.nodes = [_helper(BUFFERED, child, lineno=child.lineno) for child in node.nodes]
        return node

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.iter = _helper(LOOP, node.iter, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        return _helper(CONCAT, *node.nodes, lineno=node.lineno)

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.expr = _sized(node.expr)
        for op in node.ops:
            op.expr = _sized(op.expr)
        if not self.condition or not any(op.op in _ORDERING for op in node.ops):
            return node
        links: list[nodes.Expr] = []
        left = node.expr
        for op in node.ops:
            if op.op in _ORDERING:
                operator = nodes.Const(op.op, lineno=node.lineno)
                links.append(_helper(ORDERED, left, operator, op.expr, lineno=node.lineno))
            else:
                links.append(nodes.Compare(left, [op], lineno=node.lineno))
            left = op.expr
        chained = links[0]
        for link in links[1:]:
            chained = nodes.And(chained, link, lineno=node.lineno)
        return chained

    def visit_Getitem(self, node: nodes.Getitem) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        if not isinstance(node.arg, nodes.Slice):
            return node
        bound = [
            nodes.Const(None, lineno=node.lineno) if part is None else part
            for part in (node.arg.start, node.arg.stop, node.arg.step)
        ]
        return _helper(SLICED, node.node, *bound, lineno=node.lineno)

    def visit_Pair(self, node: nodes.Pair) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        node.key = _sized(node.key)
        return node


_ORDERING = frozenset({"lt", "lteq", "gt", "gteq"})


def _sized(expr: nodes.Expr) -> nodes.Expr:
    if isinstance(expr, nodes.Const):
        return expr
    return _helper(OPERAND, expr, lineno=expr.lineno)


def bounded(tree: nodes.Template, *, condition: bool = False) -> nodes.Template:
    rewritten = _Bounder(condition).visit(tree)
    assert isinstance(rewritten, nodes.Template)
    return rewritten
