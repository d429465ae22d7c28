"""Template benchmark: what the limits cost a normal render, and how fast a payload is refused.

Run by hand: ``python bench/bench_templates.py``. Prints one table, every number measured
in the same run: a typical node's params rendered by prana and by a bare Jinja sandbox
(the overhead of the bounds), then each payload of the bounded-templates tests, refused,
as a ratio to the typical render.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

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


def refuse(text: str, inputs: dict[str, Any]) -> Callable[[], object]:
    compiled = compile_params({"p": text})
    assert compiled is not None

    def run() -> None:
        try:
            compiled.render({"input": {"main": inputs}})
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
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'time':>10}  {'x typical':>10}")
    for name, seconds, ratio in rows:
        shown = f"{seconds * 1e6:.1f}us" if seconds < 1e-3 else f"{seconds * 1e3:.1f}ms"
        print(f"{name:<{width}}  {shown:>10}  {ratio:>10}")


if __name__ == "__main__":
    main()
