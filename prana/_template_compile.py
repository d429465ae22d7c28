"""Compiling a template string: ``$name`` rewritten, free names checked, the compiled form.

Jinja names cannot start with ``$``, so ``rewrite_template`` rewrites ``$name`` inside
``{{ }}``/``{% %}`` (outside string literals) to an internal name before Jinja parses it.
A string that is exactly one ``{{ expr }}`` compiles to an ``_Expression`` (native type; a
plain path is walked directly), anything else to a ``_Text`` (rendered to a string).
``compile_string`` and ``compile_condition`` cache the compiled forms by their text.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Mapping
from typing import Any

from jinja2 import TemplateSyntaxError, Undefined, meta, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.parser import Parser
from jinja2.utils import consume

from prana._template_env import ENV, GLOBALS, bounded
from prana._template_limits import (
    MAX_SIZE,
    PLAIN,
    PREFIX,
    LimitError,
    NotAValueError,
    checked,
    emit,
    refuse_in_value,
    refuse_non_value,
)

ROOTS: tuple[str, ...] = (
    "input",
    "nodes",
    "vars",
    "env",
    "execution",
    "workflow",
    "now",
    "webhooks",
    "secrets",
)
"""The scope roots a template may name, each written with a ``$``."""

ROOT_SET = frozenset(ROOTS)
_ROOTS_TEXT = ", ".join(f"${r}" for r in ROOTS)
_CACHE_SIZE = 4096


class CompileError(Exception):
    """A template failed to compile; the caller adds the param path."""


# --- rewriting ``$name`` -----------------------------------------------------------------

_OPENER = re.compile(r"\{[{%#]")
_CLOSERS = {"{{": "}}", "{%": "%}", "{#": "#}"}
_ENDRAW = re.compile(r"\{%[-+]?\s*endraw\s*[-+]?%\}")


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch == "_"


def rewrite_code(text: str, start: int, closer: str | None) -> tuple[str, int]:
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
            out.append(PREFIX + text[i + 1 : j])
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out), min(i, n)


_MAX_BLOCK_DEPTH = 100
"""Python's compiler refuses code indented past 100 levels, so a template with blocks
nested deeper cannot compile; it is refused before Jinja spends seconds generating it."""

_BLOCK_WORD = re.compile(r"[\s+-]*([a-z]+)")
_OPENS = frozenset({"for", "if", "macro", "call", "filter", "block", "with", "autoescape"})


def _nesting(code: str) -> int:
    """How a ``{% code %}`` tag changes the block depth: +1 opens, -1 ends, else 0."""
    word = _BLOCK_WORD.match(code)
    if word is None:
        return 0
    name = word.group(1)
    if name.startswith("end"):
        return -1
    return 1 if name in _OPENS or (name == "set" and "=" not in code) else 0


def rewrite_template(text: str) -> tuple[str, str | None]:
    """Rewrite ``$name`` in every block of a template.

    Returns the rewritten text and, when the text is exactly one ``{{ expr }}`` with
    only whitespace around it, the rewritten ``expr`` (whitespace-control marks removed).
    """
    out: list[str] = []
    expressions: list[str] = []
    other_blocks = False
    loose_text = False
    depth = 0
    i = 0
    n = len(text)
    while i < n:
        found = _OPENER.search(text, i)  # one scan to the next opener: linear overall
        if found is None:
            out.append(text[i:])
            loose_text = loose_text or bool(text[i:].strip())
            break
        j = found.start()
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
        code, k = rewrite_code(text, j + 2, closer)
        out.append(opener + code + text[k : k + 2])
        i = k + 2
        if opener == "{{" and k < n:
            expressions.append(code)
        else:
            other_blocks = True
            depth += _nesting(code)
            if depth > _MAX_BLOCK_DEPTH:
                raise CompileError(
                    f"blocks nested more than {_MAX_BLOCK_DEPTH} deep; Python cannot compile "
                    "them: use fewer nested blocks, or do the work in an action"
                )
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
    r"\s*" + PREFIX + r"([A-Za-z_]\w*)"
    r"((?:\s*\.\s*[A-Za-z_]\w*|\s*\[\s*(?:\d+|\"[^\"\\]*\"|'[^'\\]*')\s*\])*)\s*",
)
_STEP = re.compile(
    r"\.\s*([A-Za-z_]\w*)|\[\s*(\d+)\s*\]|\[\s*\"([^\"\\]*)\"\s*\]|\[\s*'([^'\\]*)'\s*\]"
)
_VIEW_ROOTS = frozenset({"nodes", "webhooks"})
"""Roots whose value is a ``ScopeView``: read through, never a template's value."""
MISS: Any = object()
"""What a plain path's walk gives when it does not find its value: Jinja decides."""

Names = tuple[tuple[str, ...], tuple[str, ...]]
"""What a template may name: scope roots (written ``$root``) and bare names."""

PARAM_NAMES: Names = (ROOTS, ())


def _check_names(found: set[str], names: Names) -> None:
    """Refuse free names that are neither scope roots, allowed bare names nor Jinja globals."""
    roots, bare = names
    params = names == PARAM_NAMES
    allowed = [f"${r}" for r in roots] + list(bare)
    allowed_text = _ROOTS_TEXT if params else ", ".join(allowed)
    for name in sorted(found):
        if name.startswith(PREFIX):
            root = name[len(PREFIX) :]
            if root in roots:
                continue
            close = difflib.get_close_matches(f"${root}", allowed, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            what = "unknown root" if params else "unknown name"
            raise CompileError(f"{what} ${root}{guess}; use one of {allowed_text}")
        if name in GLOBALS or name in bare:
            continue
        if params:
            raise CompileError(
                f"unknown name {name!r}; scope roots start with '$' ({allowed_text}), "
                f"e.g. $input.main.{name}"
            )
        close = difflib.get_close_matches(name, [*bare, *(f"${r}" for r in roots)], n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        raise CompileError(
            f"unknown name {name!r}: {guess}a retry condition sees only {allowed_text}; a value "
            f"the action reported is in the error's details, e.g. "
            f"'{{{{ $error.details.{name} }}}}'"
        )


def _syntax_message(exc: TemplateSyntaxError, source: str) -> str:
    shown = source.strip().replace(PREFIX, "$")
    return f"template syntax error in {shown!r}: {exc.message}".replace(PREFIX, "$")


class _Expression:
    """One ``{{ expr }}`` keeping its native type; a plain path skips Jinja when it can."""

    __slots__ = ("_path", "_root", "_template", "path_root")

    def __init__(self, source: str, names: Names = PARAM_NAMES, condition: bool = False) -> None:
        try:
            parser = Parser(ENV, source, state="variable")
            expr = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError(
                    f"unexpected {parser.stream.current.value!r} after the expression",
                    parser.stream.current.lineno,
                )
        except TemplateSyntaxError as exc:
            raise CompileError(_syntax_message(exc, source)) from None
        found = [expr] if isinstance(expr, nodes.Name) else list(expr.find_all(nodes.Name))
        _check_names({n.name for n in found if n.ctx == "load"}, names)
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        tree = bounded(nodes.Template(body, lineno=1), condition=condition)
        tree.set_environment(ENV)
        self._template = ENV.from_string(tree)
        self._root = ""
        self.path_root = ""
        """The root (``input``...) a plain path starts from; ``""``: not a plain path."""
        self._path: tuple[str | int, ...] = ()
        match = _PATH.fullmatch(source)
        if match is not None:
            self.path_root = match.group(1)
            self._root = PREFIX + match.group(1)
            steps: list[str | int] = []
            for step in _STEP.finditer(match.group(2)):
                attr, index, dq, sq = step.groups()
                steps.append(int(index) if index is not None else (attr or dq or sq or ""))
            self._path = tuple(steps)
            if not steps and self.path_root in _VIEW_ROOTS:
                self._root = ""  # the view itself is no value: Jinja's result is refused

    def __call__(self, context: dict[str, Any]) -> Any:
        if self._root:
            value = self.walk(context)
            if value is not MISS:
                return value
        ctx = self._template.new_context(context, shared=True)
        consume(self._template.root_render_func(ctx))
        result = ctx.vars["result"]
        if isinstance(result, Undefined):
            result._fail_with_undefined_error()
        refuse_non_value(result)
        emit(checked(result, "the value of the template"))
        if type(result) not in PLAIN:  # plain data leaves a template (a namespace: refused)
            refuse_in_value(result)
        if isinstance(result, str) and type(result) is not str:
            return str(result)  # Markup from |tojson, |escape...: the record holds plain text
        return result

    def walk(self, context: dict[str, Any]) -> Any:
        """Follow a plain path through dicts and lists; ``MISS`` means ask Jinja."""
        value: Any = context.get(self._root, MISS)
        if value is MISS:
            return MISS
        for step in self._path:
            if isinstance(step, str):
                if type(value) is dict:
                    if step not in value:
                        return MISS
                    value = value[step]
                elif isinstance(value, Mapping):
                    try:
                        value = value[step]
                    except KeyError:
                        return MISS
                else:
                    return MISS
            elif type(value) in (list, tuple) and step < len(value):
                value = value[step]
            else:
                return MISS
        return value


class _Text:
    """Text mixed with ``{{ }}`` / ``{% %}``, rendered to a string."""

    __slots__ = ("_template",)

    path_root = ""
    """Never a plain path (see ``_Expression.path_root``)."""

    def walk(self, context: dict[str, Any]) -> Any:
        """Text is never walked: ``MISS`` (see ``_Expression.walk``)."""
        return MISS

    def __init__(self, source: str, names: Names = PARAM_NAMES, condition: bool = False) -> None:
        try:
            tree = ENV.parse(source)
        except TemplateSyntaxError as exc:
            raise CompileError(_syntax_message(exc, source)) from None
        _check_names(meta.find_undeclared_variables(tree), names)
        self._template = ENV.from_string(bounded(tree, condition=condition))

    def __call__(self, context: dict[str, Any]) -> Any:
        template = self._template
        total = 0
        parts: list[str] = []
        for piece in template.root_render_func(template.new_context(context, shared=True)):
            total += len(piece)
            if total > MAX_SIZE:
                raise LimitError(
                    f"the rendered text would pass {MAX_SIZE:,} characters, the template limit"
                )
            parts.append(piece)
        emit(total)
        return "".join(parts)


Compiled = _Expression | _Text


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_string(text: str, names: Names = PARAM_NAMES, condition: bool = False) -> Compiled:
    """Compile one template string (cached by its text and the names it may use).

    ``condition``: a retry condition, where an ordering comparison with None is false.
    """
    try:
        rewritten, single = rewrite_template(text)
        if single is not None:
            return _Expression(single, names, condition)
        return _Text(rewritten, names, condition)
    except (RecursionError, SyntaxError) as exc:
        raise _too_deep(exc) from None


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_condition(text: str, names: Names = PARAM_NAMES) -> Compiled:
    """Compile a condition: a template string, or a bare expression (cached by its text).

    In a condition, an ordering comparison (``<``, ``<=``, ``>``, ``>=``) with None on
    either side is false: NoETL's ``status_code >= 500 or error != None`` reads as written
    for an error without a status code.
    """
    if "{{" in text or "{%" in text:
        return compile_string(text, names, True)
    code, _ = rewrite_code(text, 0, None)
    try:
        return _Expression(code, names, True)
    except (RecursionError, SyntaxError) as exc:
        raise _too_deep(exc) from None


def _too_deep(exc: RecursionError | SyntaxError) -> CompileError:
    """Jinja's parser and code generator recurse, and Python's compiler caps nesting: a
    template nested past either (500 parentheses, a sum of 3,000 terms, 200 nested loops)
    is refused in one line, not a traceback."""
    why = exc.msg if isinstance(exc, SyntaxError) else "Python's recursion limit"
    return CompileError(
        f"the template nests too deeply to compile ({why}); use fewer nested parentheses, "
        "operators, filters or blocks, or do the work in an action"
    )


def context_of(scope: Mapping[str, Any]) -> dict[str, Any]:
    """The Jinja variables for a scope: the globals, then each root under its internal name.

    Templates get this dict as a shared context (no copy per template), so it holds the
    globals too.
    """
    context = dict(ENV.globals)
    for key, value in scope.items():
        context[PREFIX + key] = value
    return context


def describe_error(exc: Exception) -> str:
    text = str(exc).replace(PREFIX, "$")
    if isinstance(exc, SecurityError):
        return f"blocked by the template sandbox: {text}"
    if isinstance(exc, LimitError | NotAValueError):
        return text
    if isinstance(exc, UndefinedError):
        return f"undefined: {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
