"""Template benchmark: what the limits cost a normal render, and how fast a payload is refused.

Run by hand: ``python bench/bench_templates.py``. Prints one table, every number measured
in the same run: a typical node's params rendered by prana and by a bare Jinja sandbox
(the overhead of the bounds), then each payload of the bounded-templates tests, refused,
as a ratio to the typical render, then the attacker review's payloads at their full sizes
and the compile of a 980 KB template.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from prana._template_compile import compile_string
from prana._templates import TemplateError, compile_params

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
PAYLOADS: dict[str, tuple[str, dict[str, Any]]] = importlib.import_module(
    "tests.test_templates_bounded"
).PAYLOADS

TYPICAL = {
    "url": "{{ $vars.base }}/users/{{ $input.main.user.id }}",
    "headers": {"Authorization": "Bearer {{ $env.TOKEN }}"},
    "body": {
        "amount": "{{ $nodes.validate.output.amount * 100 }}",
        "note": "{{ $input.main.user.name | upper }} ({{ $input.main.things | length }} items)",
        "ids": "{% for i in $input.main.things %}{{ i }},{% endfor %}",
    },
}
SCOPE: dict[str, Any] = {
    "input": {"main": {"user": {"id": 7, "name": "ada"}, "things": [1, 2, 3, 4, 5]}},
    "nodes": {"validate": {"output": {"amount": 12.5}, "port": "main", "status": "completed"}},
    "vars": {"base": "https://api.example.com"},
    "env": {"TOKEN": "t"},
}


NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def best(fn: Callable[[], object], *, repeat: int = 5, number: int = 1) -> float:
    """The best of ``repeat`` timings of ``number`` calls, in seconds per call."""
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        timings.append((time.perf_counter() - start) / number)
    return min(timings)


def bare_jinja() -> Callable[[], object]:
    """The same typical templates in a bare sandbox (no bounds, no ``$`` rewrite)."""
    env = ImmutableSandboxedEnvironment()
    texts = {
        "url": "{{ vars.base }}/users/{{ input.main.user.id }}",
        "auth": "Bearer {{ env.TOKEN }}",
        "amount": "{{ nodes.validate.output.amount * 100 }}",
        "note": "{{ input.main.user.name | upper }} ({{ input.main.things | length }} items)",
        "ids": "{% for i in input.main.things %}{{ i }},{% endfor %}",
    }
    templates = [env.from_string(t) for t in texts.values()]
    return lambda: [t.render(SCOPE) for t in templates]


_PUNY = "".join(chr(c) for c in range(0x100, 0x100 + 30_000))
ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    "int filter, 1,000 // of 800,000-bit ints": (
        (
            "{% set a = ('f' * 200000) | int(base=16) %}{% set b = ('e' * 199990) | int(base=16) %}"
            "{% for i in range(1000) %}{{ a // b > 0 }}{% endfor %}"
        ),
        {},
    ),
    "int.from_bytes, 1,000 % of 1,600,000-bit ints": (
        (
            "{% set a = (1).from_bytes(('x' * 200000).encode(), 'big') %}"
            "{% for i in range(1000) %}{{ a % 7 }}{% endfor %}"
        ),
        {},
    ),
    "punycode of 30,000 distinct characters": (
        "{{ $input.main.s.encode('punycode') | length }}",
        {"s": _PUNY},
    ),
    "4,900 s.isidentifier() on 1,000,000 characters": (
        "{% set s = 'a' * 999999 %}{% for i in range(4900) %}{{ s.isidentifier() }}{% endfor %}",
        {},
    ),
    "10,000 s[::-1] of 1,000,000 characters": (
        "{% set s = 'a' * 999999 %}{% for i in range(10000) %}{{ s[::-1] | length }}{% endfor %}",
        {},
    ),
    "strptime with a 600,000-character format": (
        "{{ $now.strptime('x', 'a%' * 300000) }}",
        {},
    ),
}
"""The attacker review's payloads at the sizes that ran for minutes or hours before."""

DEEP = {
    "compile 500 nested parentheses": "{{ " + "(" * 500 + "1" + ")" * 500 + " }}",
    "compile a sum of 3,000 terms": "{{ " + " + ".join(["1"] * 3000) + " }}",
    "compile 200 nested loops": "{% for a in [1] %}" * 200 + "{% endfor %}" * 200,
}


def refuse_compile(text: str) -> Callable[[], object]:
    def run() -> None:
        try:
            compile_params({"p": text})
        except TemplateError:
            return
        raise AssertionError(f"not refused: {text[:60]}")

    return run


def refuse(text: str, inputs: dict[str, Any]) -> Callable[[], object]:
    compiled = compile_params({"p": text})
    assert compiled is not None

    def run() -> None:
        try:
            compiled.render({"input": {"main": inputs}, "now": NOW})
        except TemplateError:
            return
        raise AssertionError(f"not refused: {text[:60]}")

    return run


def main() -> None:
    compiled = compile_params(TYPICAL)
    assert compiled is not None
    typical = best(lambda: compiled.render(SCOPE), number=2000)
    bare = best(bare_jinja(), number=2000)
    rows: list[tuple[str, float, str]] = [
        ("typical params (5 templates), prana", typical, "1"),
        ("same templates, bare Jinja sandbox", bare, f"{bare / typical:.2f}"),
    ]
    for name, (text, inputs) in PAYLOADS.items():
        seconds = best(refuse(text, inputs), repeat=3)
        rows.append((f"refuse: {name}", seconds, f"{seconds / typical:,.0f}"))
    for name, (text, inputs) in ATTACKS.items():
        seconds = best(refuse(text, inputs), repeat=3)
        rows.append((f"refuse: {name}", seconds, f"{seconds / typical:,.0f}"))
    for name, text in DEEP.items():
        seconds = best(refuse_compile(text), repeat=3)
        rows.append((f"refuse: {name}", seconds, f"{seconds / typical:,.0f}"))
    big = "{{ 1 }}" * 140_000
    seconds = best(lambda: compile_string.__wrapped__(big), repeat=1)
    rows.append(("compile 140,000 '{{ 1 }}' (980 KB)", seconds, f"{seconds / typical:,.0f}"))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'time':>10}  {'x typical':>10}")
    for name, seconds, ratio in rows:
        shown = f"{seconds * 1e6:.1f}us" if seconds < 1e-3 else f"{seconds * 1e3:.1f}ms"
        print(f"{name:<{width}}  {shown:>10}  {ratio:>10}")


if __name__ == "__main__":
    main()
