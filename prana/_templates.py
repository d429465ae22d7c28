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
Below the root a missing key is ``None``, as in Prana: ``{{ $input.main.missing.deeper }}``
is ``None`` (``""`` in text); using it in arithmetic is an error.

Evaluation runs in Jinja's ``ImmutableSandboxedEnvironment``: no ``_``-prefixed
attributes, no mutating methods. Every failure (syntax, sandbox, arithmetic on a
missing value) raises ``TemplateError`` naming the param path. Dict keys are not
rendered; static parts of the params are shared with the original, never mutated.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

from jinja2 import ChainableUndefined, TemplateSyntaxError, Undefined, meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import consume

__all__ = ["CompiledParams", "TemplateError", "compile_params", "evaluate"]

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


# --- the Jinja environment ---------------------------------------------------------------


def _finalize(value: Any) -> Any:
    """Render values in text the way a JSON-minded workflow author expects."""
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return value


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox, with dict keys winning over dict methods and unsafe access raising."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Read ``obj.attribute``: a mapping's key first (so ``.items`` finds a key "items")."""
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        """Raise at once: a blocked attribute must fail loudly, not render as ``""``."""
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )


_ENV = _Environment(undefined=ChainableUndefined, finalize=_finalize, autoescape=False)
_GLOBALS = frozenset(_ENV.globals)


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


def _check_names(
    names: set[str], roots: tuple[str, ...] = ROOTS, bare: tuple[str, ...] = ()
) -> None:
    """Refuse free names that are neither scope roots, allowed bare names nor Jinja globals."""
    roots_text = _ROOTS_TEXT if roots is ROOTS else ", ".join(f"${r}" for r in roots)
    for name in sorted(names):
        if name.startswith(_PREFIX):
            root = name[len(_PREFIX) :]
            if root not in roots:
                raise _CompileError(f"unknown root ${root}; use one of {roots_text}")
        elif name not in _GLOBALS and name not in bare:
            if bare:
                raise _CompileError(
                    f"unknown name {name!r}; use a root with '$' ({roots_text}) or one of "
                    f"{', '.join(bare)}"
                )
            raise _CompileError(
                f"unknown name {name!r}; scope roots start with '$' ({roots_text}), "
                f"e.g. $input.main.{name}"
            )


def _syntax_message(exc: TemplateSyntaxError, source: str) -> str:
    shown = source.strip().replace(_PREFIX, "$")
    return f"template syntax error in {shown!r}: {exc.message}".replace(_PREFIX, "$")


class _Expression:
    """One ``{{ expr }}`` keeping its native type; a plain path skips Jinja when it can."""

    __slots__ = ("_path", "_root", "_template")

    def __init__(
        self, source: str, roots: tuple[str, ...] = ROOTS, bare: tuple[str, ...] = ()
    ) -> None:
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
        names = [expr] if isinstance(expr, nodes.Name) else list(expr.find_all(nodes.Name))
        _check_names({n.name for n in names if n.ctx == "load"}, roots, bare)
        expr.set_environment(_ENV)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        self._template = _ENV.from_string(nodes.Template(body, lineno=1))
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
        return None if isinstance(result, Undefined) else result

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

    def __init__(
        self, source: str, roots: tuple[str, ...] = ROOTS, bare: tuple[str, ...] = ()
    ) -> None:
        try:
            tree = _ENV.parse(source)
        except TemplateSyntaxError as exc:
            raise _CompileError(_syntax_message(exc, source)) from None
        _check_names(meta.find_undeclared_variables(tree), roots, bare)
        self._template = _ENV.from_string(tree)

    def __call__(self, context: dict[str, Any]) -> Any:
        template = self._template
        return _ENV.concat(template.root_render_func(template.new_context(context, shared=True)))


_Compiled = _Expression | _Text


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_string(
    text: str, roots: tuple[str, ...] = ROOTS, bare: tuple[str, ...] = ()
) -> _Compiled:
    """Compile one template string (cached by its text and the names it may use)."""
    rewritten, single = _rewrite_template(text)
    if single is not None:
        return _Expression(single, roots, bare)
    return _Text(rewritten, roots, bare)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile_condition(
    text: str, roots: tuple[str, ...] = ROOTS, bare: tuple[str, ...] = ()
) -> _Compiled:
    """Compile a condition: a template string, or a bare expression (cached by its text)."""
    if "{{" in text or "{%" in text:
        return _compile_string(text, roots, bare)
    code, _ = _rewrite_code(text, 0, None)
    return _Expression(code, roots, bare)


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
        them; untemplated parts are the original objects.
        """
        return self._root.render(_context(scope))


def compile_params(params: Any) -> CompiledParams | None:
    """Compile every template in ``params``; ``None`` when there are none (pass it as is).

    Raises ``TemplateError`` naming the param path when a template does not compile.
    """
    root = _build(params, "")
    return None if root is None else CompiledParams(root)


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
        compiled = _compile_condition(text, roots, bare)
    except _CompileError as exc:
        raise TemplateError(path, str(exc)) from None
    context = _context(scope)
    if names:
        context.update(names)
    return _StringPart(compiled, path).render(context)
