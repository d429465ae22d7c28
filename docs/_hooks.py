"""MkDocs hooks: reference tables generated from the code, so the docs cannot drift from it.

A page writes a marker such as ``<!-- prana:builtin-actions -->`` on a line of its own; the
hook replaces it with the table built from the running code. An unknown marker fails the
build (``mkdocs build --strict`` turns the warning into an error).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

log = logging.getLogger("mkdocs.plugins.prana")

MARKER = re.compile(r"^<!-- prana:([a-z-]+) -->$(?:\n> \*Generated from the code[^\n]*$)?", re.M)
"""A marker, with the note after it that stands in for the table where the source is read."""


def _doc(obj: Any) -> str:
    """An object's docstring as one paragraph of Markdown (``x`` code spans kept)."""
    text = inspect.getdoc(obj) or ""
    return " ".join(text.split()).replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def builtin_actions() -> str:
    """Every built-in action: its type, ports, whether it suspends, and its docstring."""
    from prana import Registry

    registry = Registry()
    lines = []
    for type_name in registry.types():
        spec = registry.get(type_name)
        assert spec is not None
        ports = ", ".join(f"`{p}`" for p in spec.output_ports) if spec.output_ports else "any"
        traits = []
        if spec.trigger:
            traits.append("trigger (the entry node)")
        if spec.resume is not None:
            traits.append("suspends and resumes")
        if spec.side_effects:
            traits.append("side effects (use the idempotency key)")
        lines += [
            f"### `{type_name}`",
            "",
            f"**Output ports:** {ports}." + (f" **Kind:** {', '.join(traits)}." if traits else ""),
            "",
            _doc(spec.fn),
            "",
        ]
        if spec.resume is not None:
            lines += [f"On resume: {_doc(spec.resume)}", ""]
    return "\n".join(lines)


def _member_docs(enum_class: type) -> dict[str, str]:
    """The docstrings written under an enum's members, by member name, as one line each."""
    source = inspect.getsource(enum_class)
    found = re.findall(r'^\s+(\w+) = "\w+"\n\s+"""(.*?)"""', source, re.M | re.S)
    return {name: " ".join(text.split()).replace("``", "`") for name, text in found}


def events() -> str:
    """Every event type, what it means, and the fields an event carries."""
    from prana import Event, EventType

    meaning = _member_docs(EventType)
    rows = ["| event | value | when |", "|---|---|---|"]
    rows += [
        f"| `EventType.{e.name}` | `{e.value}` | {_cell(meaning.get(e.name, ''))} |"
        for e in EventType
    ]
    fields = ["| field | type |", "|---|---|"]
    fields += [f"| `{a.name}` | `{_cell(str(a.type))}` |" for a in attrs.fields(Event)]
    return "\n".join([*rows, "", "Every event is a `prana.Event` with these fields:", "", *fields])


def error_codes() -> str:
    """Every ``ErrorCode`` value with its meaning."""
    from prana._model import ErrorCode

    docs = _member_docs(ErrorCode)
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| `{code.value}` | {_cell(docs.get(code.name, ''))} |" for code in ErrorCode]
    return "\n".join(rows)


def retry_policy_fields() -> str:
    """Every ``RetryPolicy`` field: its type and default, from the class itself."""
    from prana import RetryPolicy

    rows = ["| field | type | default |", "|---|---|---|"]
    for field in attrs.fields(RetryPolicy):
        default = field.default
        shown = "—" if default is attrs.NOTHING else f"`{default!r}`"
        rows.append(f"| `{field.name}` | `{_cell(str(field.type))}` | {shown} |")
    return "\n".join(rows)


def cli() -> str:
    """Every ``prana`` command with its options, from the parser itself."""
    from scheduling._cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = []
    for name, command in sub.choices.items():
        lines += [f"### `prana {name}`", "", command.description or "", "", "```text"]
        lines += [command.format_usage().strip().replace("usage: ", ""), "```", ""]
        rows = ["| option | what |", "|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = ", ".join(action.option_strings) or action.dest
            rows.append(f"| `{flag}` | {_cell(action.help or '')} |")
        lines += [*rows, ""]
    return "\n".join(lines)


def exit_codes() -> str:
    """The exit codes, from the constants the commands return."""
    from scheduling._cli import _common

    source = inspect.getsource(_common)
    found = re.findall(r'^(EXIT_\w+) = (\d+)\n"""(.*?)"""', source, re.M | re.S)
    rows = ["| code | name | meaning |", "|---|---|---|"]
    rows += [f"| {v} | `{n}` | {_cell(' '.join(d.split()))} |" for n, v, d in found]
    return "\n".join(rows)


def condition_scope() -> str:
    """Every name a retry condition template may use (``CONDITION_SCOPE``)."""
    from prana._decision import CONDITION_SCOPE

    rows = ["| name | what it holds |", "|---|---|"]
    rows += [f"| `{name}` | {_cell(what)} |" for name, what in CONDITION_SCOPE.items()]
    return "\n".join(rows)


def limits() -> str:
    """Every ``prana.Limits`` field: its default and what it bounds, from the class."""
    from prana import Limits

    text = " ".join((inspect.getdoc(Limits) or "").split())
    rows = ["| limit | default | what it bounds |", "|---|---|---|"]
    for field in attrs.fields(Limits):
        found = re.search(rf"``{field.name}``: (.*?)(?= ``\w+``:| Sizes count|$)", text)
        what = found.group(1).replace("``", "`") if found else ""
        rows.append(f"| `{field.name}` | {field.default:,} | {_cell(what)} |")
    return "\n".join(rows)


def state_machines() -> str:
    """The three state tables (execution, node run, attempt): every edge and who takes it."""
    from prana import _state

    def table(title: str, rows: Any, operator: Any, recover: Any) -> list[str]:
        lines = [f"**{title}**", "", "| from | to | taken by |", "|---|---|---|"]
        for src, targets in rows.items():
            for dst in sorted(targets, key=lambda s: s.value):
                who = "a cancel" if dst.value == "cancelled" else "a run"
                if (src, dst) in operator:
                    who = "an operator: a redrive"
                elif (src, dst) in recover:
                    who = "a recovery: a dead process's checkpoint taken up"
                lines.append(f"| `{src.value}` | `{dst.value}` | {who} |")
        return [*lines, ""]

    interrupted = {(_state.A.RUNNING, _state.A.INTERRUPTED)}
    return "\n".join(
        [
            *table("Executions", _state.TRANSITIONS, _state.REDRIVE, _state.RECOVER),
            *table("Node runs", _state.NODE_TRANSITIONS, _state.NODE_REDRIVE, set()),
            *table("Attempts", _state.ATTEMPT_TRANSITIONS, set(), interrupted),
        ]
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "builtin-actions": builtin_actions,
    "events": events,
    "error-codes": error_codes,
    "retry-policy-fields": retry_policy_fields,
    "cli": cli,
    "exit-codes": exit_codes,
    "condition-scope": condition_scope,
    "limits": limits,
    "state-machines": state_machines,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each ``<!-- prana:NAME -->`` marker with the table generated for NAME."""
    page = kwargs.get("page")

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        generator = GENERATORS.get(name)
        if generator is None:
            log.warning("%s: unknown generated section %r", getattr(page, "url", "?"), name)
            return match.group(0)
        return generator()

    return MARKER.sub(replace, markdown)
