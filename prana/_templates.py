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

Every failure (syntax, sandbox, undefined, a limit, arithmetic, a value that is a
function or method) raises ``TemplateError`` naming the param path; the executor records
it as a non-retryable ``template_error``.
Dict keys are not rendered; static parts of the params are shared with the original,
never mutated.

Where each part lives: this module renders (params, conditions) and is the one the rest
of prana imports; ``prana._template_compile`` rewrites ``$name`` and compiles a string
into its form; ``prana._template_env`` is the sandboxed environment and its hooks;
``prana._template_limits`` holds the limits, the budget of a render and the checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prana._template_compile import (
    MISS,
    ROOT_SET,
    ROOTS,
    Compiled,
    CompileError,
    compile_condition,
    compile_string,
    context_of,
    describe_error,
)
from prana._template_limits import (
    BUDGET,
    CALL_STEPS,
    FILTER_STEPS,
    MAX_DATE_FORMAT,
    MAX_FORMAT_WIDTH,
    MAX_INT_BITS,
    MAX_LIPSUM_WORDS,
    MAX_RANGE,
    MAX_SIZE,
    MAX_STEPS,
    MAX_WORK,
    PREFIX,
    Budget,
)

__all__ = [
    "CALL_STEPS",
    "FILTER_STEPS",
    "MAX_DATE_FORMAT",
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


class TemplateError(ValueError):
    """A template could not be compiled or evaluated; ``path`` names the param."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.message))


# --- params ------------------------------------------------------------------------------


class _StringPart:
    """One template string at a known param path; failures become ``TemplateError``."""

    __slots__ = ("_compiled", "_path")

    def __init__(self, compiled: Compiled, path: str) -> None:
        self._compiled = compiled
        self._path = path

    def render(self, context: dict[str, Any]) -> Any:
        try:
            return self._compiled(context)
        except Exception as exc:
            raise TemplateError(self._path, describe_error(exc)) from exc

    def walk(self, context: dict[str, Any]) -> Any:
        """``render``'s value when the template's plain path finds it, else ``MISS``."""
        return self._compiled.walk(context)

    def roots(self) -> set[str] | None:
        """The one root this template's plain path reads, or ``None`` (not a plain path)."""
        root = self._compiled.path_root
        return {root} if root else None


class _DictPart:
    """A mapping with templates below it: rendered into a new dict."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[Any, _Part | None, Any]]) -> None:
        self._items = items

    def render(self, context: dict[str, Any]) -> Any:
        return {
            key: value if part is None else part.render(context) for key, part, value in self._items
        }

    def walk(self, context: dict[str, Any]) -> Any:
        result = {}
        for key, part, value in self._items:
            if part is not None:
                value = part.walk(context)
                if value is MISS:
                    return MISS
            result[key] = value
        return result

    def roots(self) -> set[str] | None:
        return _roots(part for _, part, _ in self._items)


class _ListPart:
    """A list or tuple with templates below it: rendered into a new list."""

    __slots__ = ("_items",)

    def __init__(self, items: list[tuple[_Part | None, Any]]) -> None:
        self._items = items

    def render(self, context: dict[str, Any]) -> Any:
        return [value if part is None else part.render(context) for part, value in self._items]

    def walk(self, context: dict[str, Any]) -> Any:
        result = []
        for part, value in self._items:
            if part is not None:
                value = part.walk(context)
                if value is MISS:
                    return MISS
            result.append(value)
        return result

    def roots(self) -> set[str] | None:
        return _roots(part for part, _ in self._items)


def _roots(parts: Iterable[_Part | None]) -> set[str] | None:
    """The roots the parts' plain paths read; ``None`` if a part is not a plain path."""
    found: set[str] = set()
    for part in parts:
        if part is not None:
            roots = part.roots()
            if roots is None:
                return None
            found |= roots
    return found


_Part = _StringPart | _DictPart | _ListPart


def _join(path: str, key: Any) -> str:
    return str(key) if not path else f"{path}.{key}"


def _build(value: Any, path: str) -> _Part | None:
    """The renderer for ``value``, or ``None`` when it holds no template."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return None
        try:
            compiled = compile_string(value)
        except CompileError as exc:
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


WALKED_ROOTS = frozenset({"input", "vars"})
"""The roots ``CompiledParams.walk`` is given: plain data, read without side effects."""


class CompiledParams:
    """A params structure with its templates compiled; ``render(scope)`` evaluates them."""

    __slots__ = ("_root", "walks")

    def __init__(self, root: _Part) -> None:
        self._root = root
        roots = None if isinstance(root, _StringPart) else root.roots()
        self.walks = roots is not None and roots <= WALKED_ROOTS
        """The params are a dict or list, and every template in them a plain path over
        ``$input`` or ``$vars``: ``walk`` applies."""

    def walk(self, input_data: Any, variables: Any) -> dict[str, Any] | list[Any] | None:
        """``render``'s result by walking the plain paths alone, or ``None``.

        Rule: only for ``walks`` params. Each template is a plain path, and ``render``
        evaluates a plain path by this same walk first (``_Expression.__call__``), through
        the same ``$input`` and ``$vars`` values ``template_scope`` gives, with no budget
        spent and nothing else read; so when every walk finds its value, ``render`` would
        return this very structure (a new dict or list, never ``None``). A walk that finds
        nothing (or raises) gives ``None``, and the caller renders as usual, which walks
        again (reading plain data has no side effect) and then asks Jinja, raising the
        same ``TemplateError`` it always did. ``tests/test_templates.py`` holds both to
        the same results.
        """
        try:
            result = self._root.walk({_INPUT: input_data, _VARS: variables})
        except Exception:  # noqa: BLE001 - render raises it again, as a TemplateError
            return None
        return None if result is MISS else result

    def render(self, scope: Mapping[str, Any]) -> Any:
        """A new structure with every template evaluated against ``scope``.

        Mappings come back as dicts and tuples as lists wherever a template sits below
        them; untemplated parts are the original objects. All the templates of one call
        share one budget (``MAX_STEPS``, ``MAX_WORK``, ``MAX_SIZE`` rendered).
        """
        token = BUDGET.set(Budget())
        try:
            return self._root.render(context_of(scope))
        finally:
            BUDGET.reset(token)


_INPUT = PREFIX + "input"
_VARS = PREFIX + "vars"


def compile_params(params: Any) -> CompiledParams | None:
    """Compile every template in ``params``; ``None`` when there are none (pass it as is).

    Raises ``TemplateError`` naming the param path when a template does not compile.
    """
    root = _build(params, "")
    return None if root is None else CompiledParams(root)


def _render_one(compiled: Compiled, path: str, context: dict[str, Any]) -> Any:
    token = BUDGET.set(Budget())
    try:
        return _StringPart(compiled, path).render(context)
    finally:
        BUDGET.reset(token)


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
    roots = ROOTS if scope.keys() <= ROOT_SET else tuple(sorted(scope))
    bare = tuple(sorted(names)) if names else ()
    try:
        compiled = compile_condition(text, (roots, bare))
    except CompileError as exc:
        raise TemplateError(path, str(exc)) from None
    context = context_of(scope)
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
        compile_condition(text, (tuple(sorted(roots)), tuple(sorted(bare))))
    except CompileError as exc:
        raise TemplateError(path, str(exc)) from None
