"""Templates are bounded: size, work, ranges and format widths have limits (DESIGN §7).

Every payload here would allocate gigabytes or run for hours without the limits. Each
must fail fast as a ``TemplateError`` naming the param, and through the executor as a
non-retryable ``template_error``. Memory is measured with ``tracemalloc`` (deterministic);
time is bounded by construction (a work budget), so no test here reads a clock.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prana import (
    Connection,
    Failed,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Workflow,
    execute_workflow,
)
from prana._templates import (
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
    TemplateError,
    compile_params,
    evaluate,
)

PEAK_BYTES = 64 * 2**20
"""No refused payload may make Python allocate more than this on the way."""


def render(params: Any, **inputs: Any) -> Any:
    compiled = compile_params(params)
    assert compiled is not None
    return compiled.render({"input": {"main": inputs}})


def refused(params: Any, *, trace: bool = True, **inputs: Any) -> TemplateError:
    """Render ``params`` expecting a limit error; check the allocation peak on the way.

    ``trace=False`` skips ``tracemalloc`` (which slows Python several times) for payloads
    that allocate nothing big and are stopped by the step or work budget.
    """
    if not trace:
        with pytest.raises(TemplateError) as info:
            render(params, **inputs)
        return info.value
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as info:
            render(params, **inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MiB allocated before refusing"
    return info.value


PAYLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "string repeat": ("{{ 'a' * 10**9 }}", {}),
    "string repeat from input": ("{{ 'a' * $input.main.n }}", {"n": 10**9}),
    "list repeat": ("{{ [1, 2] * 10**9 }}", {}),
    "int power": ("{{ 10 ** (10 ** 10) }}", {}),
    "int product": (
        (
            "{% set ns = namespace(x=3) %}{% for i in range(40) %}"
            "{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x > 0 }}"
        ),
        {},
    ),
    "range": ("{{ range(10**9) | list | length }}", {}),
    "nested ranges, no output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        {},
    ),
    "nested ranges, output": (
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        {},
    ),
    "three nested loops over input": (
        (
            "{% for a in $input.main.xs %}{% for b in $input.main.xs %}"
            "{% for c in $input.main.xs %}"
            "{% endfor %}{% endfor %}{% endfor %}"
        ),
        {"xs": list(range(1000))},
    ),
    "lipsum": ("{{ lipsum(n=10**6) }}", {}),
    "percent format filter": ("{{ '%0999999999d' | format(1) }}", {}),
    "percent operator": ("{{ '%.999999999f' % 1.5 }}", {}),
    "str.format width": ("{{ '{:>999999999}'.format(1) }}", {}),
    "str.format nested width": ("{{ '{:>{}}'.format(1, 999999999) }}", {}),
    "str.format repeated field": (
        "{{ ('{0}' * 300000).format('x' * 900000) }}",
        {},
    ),
    "percent repeated arg": ("{{ ('%(a)s' * 100000) % {'a': 'x' * 900000} }}", {}),
    "center filter": ("{{ 'x' | center(10**9) }}", {}),
    "center method": ("{{ 'x'.center(10**9) }}", {}),
    "ljust method": ("{{ 'x'.ljust(10**9) }}", {}),
    "zfill method": ("{{ '1'.zfill(10**9) }}", {}),
    "expandtabs": ("{{ ('\t' * 100000).expandtabs(100000) }}", {}),
    "replace growth": (
        "{% set s = 'x' * 1000 %}{{ s.replace('x', s).replace('x', s) | length }}",
        {},
    ),
    "replace filter growth": ("{% set s = 'x' * 1000 %}{{ (s | replace('', s)) | length }}", {}),
    "join growth": ("{{ range(100000) | join('x' * 100000) | length }}", {}),
    "str join growth": ("{{ ('x' * 100000).join(range(100000) | map('string')) | length }}", {}),
    "translate growth": ("{{ ('a' * 100000).translate({97: 'b' * 100000}) | length }}", {}),
    "int to_bytes": ("{{ (1).to_bytes(10**9, 'big') | length }}", {}),
    "indent": ("{{ ('x\n' * 100000) | indent(100000) | length }}", {}),
    "wordwrap": ("{{ ('x' * 100000) | wordwrap(1, wrapstring='y' * 100000) | length }}", {}),
    "batch fill": ("{{ [1] | batch(10**9, 'x') | list | length }}", {}),
    "slice": ("{{ [1] | slice(10**9) | list | length }}", {}),
    "tojson indent": ("{{ [[[[1]]]] | tojson(indent=10**9) }}", {}),
    "concat doubling": (
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
            "{% endfor %}{{ ns.s | length }}"
        ),
        {},
    ),
    "list doubling in literals": (
        (
            "{% set a = [1, 1] %}{% set b = [a, a] %}{% set c = [b, b, b, b] %}"
            "{% set d = [c, c, c, c] %}"
            "{% set e = [d, d, d, d] %}{% set f = [e, e, e, e] %}{% set g = [f, f, f, f] %}"
            "{% set h = [g, g, g, g] %}{% set i = [h, h, h, h] %}{% set j = [i, i, i, i] %}"
            "{% set k = [j, j, j, j] %}{% set l = [k, k, k, k] %}{{ l | string | length }}"
        ),
        {},
    ),
    "nested structure as a value": (
        (
            "{% set a = ['x' * 999] * 1000 %}{% set b = [a, a, a, a, a, a, a, a] %}"
            "{% set c = [b, b, b, b, b, b, b, b] %}{{ [c, c, c, c, c, c, c, c] }}"
        ),
        {},
    ),
    "comparison in a loop": (
        (
            "{% set big = range(100000) | list %}{% for i in range(100000) %}"
            "{% if -1 in big %}{% endif %}{% endfor %}"
        ),
        {},
    ),
    "filter in a loop": (
        (
            "{% set big = range(100000) | list %}{% for i in range(100000) %}"
            "{{ big | sum }}{% endfor %}"
        ),
        {},
    ),
    "macro output in a loop": (
        (
            "{% macro m() %}{% for i in range(1000) %}" + "y" * 1000 + "{% endfor %}{% endmacro %}"
            "{% set ns = namespace(n=0) %}{% for i in range(1000) %}"
            "{% set ns.n = ns.n + m() | length %}"
            "{% endfor %}{{ ns.n }}"
        ),
        {},
    ),
    "recursive loop": (
        (
            "{% for x in [1] recursive %}{% if loop.depth < 3 %}"
            "{{ loop(range(100000)) }}{% endif %}"
            "{% endfor %}"
        ),
        {},
    ),
    "recursive macro fan-out": (
        (
            "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
            "{{ f(40) }}"
        ),
        {},
    ),
}


BUDGET_BOUND = frozenset(
    {
        "comparison in a loop",
        "filter in a loop",
        "recursive loop",
        "recursive macro fan-out",
        "str join growth",
    }
)
"""Payloads stopped by the step or work budget: they allocate little, and run untraced."""


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_unbounded_templates_are_refused(name: str) -> None:
    """Each payload fails as a TemplateError naming the param, allocating little on the way."""
    text, inputs = PAYLOADS[name]
    error = refused({"body": {"amount": text}}, trace=name not in BUDGET_BOUND, **inputs)
    assert error.path == "body.amount"
    assert "limit" in error.message, error.message


def test_the_issue_payloads_name_their_limit() -> None:
    """The message says which limit was hit and how far, so the author knows what to change."""
    assert "1,000,000,000 characters" in refused({"p": "{{ 'a' * 10**9 }}"}).message
    assert f"{MAX_SIZE:,}" in refused({"p": "{{ 'a' * 10**9 }}"}).message
    width = refused({"p": "{{ '{:>999999999}'.format(1) }}"}).message
    assert "999999999" in width
    assert f"{MAX_FORMAT_WIDTH:,}" in width
    loops = refused(
        {"p": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}
    ).message
    assert f"{MAX_STEPS:,} steps" in loops
    assert f"{MAX_RANGE:,}" in refused({"p": "{{ range(10**9) | list }}"}).message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ 'ab' * 3 }}", "ababab"),
        ("{{ [0] * 3 }}", [0, 0, 0]),
        ("{{ 2 ** 64 }}", 2**64),
        ("{{ ('x' * 999999) | length }}", 999999),
        ("{{ range(10000) | map('string') | map('list') | sum(start=[]) | length }}", 38890),
        ("{{ range(100000) | list | length }}", 100000),
        ("{% for i in range(99000) %}{% endfor %}", ""),
        ("{{ '%05d' | format(42) }}", "00042"),
        ("{{ '%-6s|' % 'ab' }}", "ab    |"),
        ("{{ '%(n).2f' % {'n': 1.5} }}", "1.50"),
        ("{{ '{:>6}'.format(1) }}", "     1"),
        ("{{ '{:>{}}'.format(1, 4) }}", "   1"),
        ("{{ '{0}-{0}'.format('a') }}", "a-a"),
        ("{{ 'x' | center(5) }}", "  x  "),
        ("{{ 'a-b' | replace('-', '+') }}", "a+b"),
        ("{{ [1, 2] | join(', ') }}", "1, 2"),
        ("{{ ','.join(['a', 'b']) }}", "a,b"),
        ("{{ [1, 2, 3] | batch(2) | list }}", [[1, 2], [3]]),
        ("{{ {'a': [1]} | tojson(indent=2) }}", '{\n  "a": [\n    1\n  ]\n}'),
        ("{{ 'a' ~ 1 ~ none }}", "a1None"),
        ("{{ 3 in [1, 2, 3] }}", True),
        ("{{ (1).to_bytes(2, 'big') | length }}", 2),
        ("{{ lipsum(2, html=False) | wordcount > 10 }}", True),
        ("{{ [[1], [2]] | sum(start=[]) }}", [1, 2]),
        ("{% for i in range(3) %}{{ i }}{% endfor %}", "012"),
        ("{{ ('f' * 1000) | int(base=16) > 0 }}", True),
        ("{{ (1).from_bytes('ab'.encode(), 'big') }}", 24930),
        ("{{ 'é'.encode('UTF_8') | length }}", 2),
        ("{{ 'é'.encode('latin-1').decode('latin1') }}", "é"),
        ("{{ 'abcdef'[1:3] ~ [1, 2, 3][::-1] | join }}", "bc321"),
        ("{{ ('ab' * 1000).count('a') }}", 1000),
        (
            (
                "{% for x in [[1, [2]], [3]] recursive %}"
                "{{ x if x is number else loop(x) }}{% endfor %}"
            ),
            "123",
        ),
    ],
)
def test_ordinary_templates_render_as_before(text: str, expected: Any) -> None:
    """Templates well inside the limits render exactly as they did without them."""
    assert render({"p": text})["p"] == expected


@pytest.mark.parametrize(
    ("document", "heading"),
    [("README.md", "## Templates"), ("docs/reference/templates.md", "## Limits")],
)
def test_the_docs_state_the_limits_in_force(document: str, heading: str) -> None:
    """The README's and the reference's tables of template limits show the enforced numbers."""
    text = (Path(__file__).parent.parent / document).read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    limits = (
        MAX_SIZE,
        MAX_STEPS,
        MAX_WORK,
        MAX_RANGE,
        MAX_FORMAT_WIDTH,
        MAX_INT_BITS,
        MAX_LIPSUM_WORDS,
    )
    for value in limits:
        assert f"| {value:,} |" in section, value
    weights = f"filter, test or comparison {FILTER_STEPS}, a call (macro, method, function) "
    assert weights + str(CALL_STEPS) in section


def test_budget_is_shared_by_every_template_of_one_render() -> None:
    """Steps are counted per render of a node's params, not per string, so many strings share it."""
    loop = "{% for i in range(60000) %}{% endfor %}"
    assert render({"a": loop}) == {"a": ""}
    error = refused({"a": loop, "b": [loop] * 40})
    assert "steps" in error.message
    assert error.path.startswith("b[")


def test_rendered_text_has_a_size_cap() -> None:
    """Text output past the cap is refused even when every piece is small."""
    ok = "{% for i in range(1000) %}" + "y" * 999 + "{{ i % 10 }}{% endfor %}"
    assert len(render({"p": ok})["p"]) == 1_000_000
    over = "{% for i in range(1001) %}" + "y" * 999 + "{{ i % 10 }}{% endfor %}"
    assert "characters" in refused({"p": over}).message


def test_a_template_result_has_a_size_cap_but_a_plain_path_does_not() -> None:
    """Data read by a plain path passes whole; a value a template computes is capped."""
    big = "x" * (MAX_SIZE + 10)
    assert render({"p": "{{ $input.main.big }}"}, big=big)["p"] == big
    assert "limit" in refused({"p": "{{ $input.main.big ~ '' }}"}, big=big).message


def test_conditions_are_bounded_too() -> None:
    """``evaluate`` (retry conditions) runs under the same limits."""
    with pytest.raises(TemplateError, match="limit") as info:
        evaluate("{{ ('a' * 10**9) | length > 0 }}", {"input": {}}, path="retry_when")
    assert info.value.path == "retry_when"


def test_payload_through_the_executor_is_a_non_retryable_template_error() -> None:
    """A node whose params blow a limit fails once, as ``template_error``, naming the param."""
    workflow = Workflow(
        id="wf",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="pay",
                type="data.set_data",
                params={"value": {"amount": "{{ 'a' * $input.main.n }}"}},
                settings=NodeSettings(retry=RetryPolicy(max_attempts=5, retry_on=["Exception"])),
            ),
        ],
        connections=[Connection(from_node="start", to_node="pay")],
    )
    outcome = execute_workflow(workflow, {"n": 10**9}, registry=Registry())
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "template_error"
    assert outcome.error.node_key == "pay"
    assert "params.value.amount" in outcome.error.message
    assert "limit" in outcome.error.message
    (record,) = outcome.execution.node_executions["pay"]
    assert len(record.attempts) == 1


# --- a property: whatever the composition, the result stays under the cap ----------------

_GROWERS: list[Callable[[str], str]] = [
    lambda v: f"{v} ~ {v}",
    lambda v: f"[{v}, {v}, {v}]",
    lambda v: f"{v} * 1000",
    lambda v: f"({v} | string) * 100",
    lambda v: f"{v} | join('{'z' * 50}')",
    lambda v: f"'%s%s' % ({v}, {v})",
    lambda v: f"'{{0}}{{0}}{{0}}'.format({v})",
    lambda v: f"{v} | tojson",
    lambda v: f"{v} | center(900)",
    lambda v: f"{{{v}: {v}}} | dictsort",
    lambda v: f"[{v}] | sum(start=[{v}])",
]


def _composed(steps: list[int]) -> str:
    """A template that applies the growers in order, each to the previous value."""
    lines = ["{% set v0 = 'abc' %}"]
    for n, index in enumerate(steps, start=1):
        lines.append(f"{{% set v{n} = {_GROWERS[index](f'v{n - 1}')} %}}")
    return "".join(lines) + f"{{{{ v{len(steps)} }}}}"


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(range(len(_GROWERS))), min_size=1, max_size=16))
def test_any_composition_of_growing_operations_stays_bounded(steps: list[int]) -> None:
    """Chaining operations that grow their input ends in a value under the cap, or a refusal."""
    outcome: Any
    tracemalloc.start()
    try:
        try:
            outcome = render({"p": _composed(steps)})["p"]
        except TemplateError as exc:
            outcome = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES
    if isinstance(outcome, TemplateError):
        assert outcome.path == "p"
    else:
        assert len(str(outcome)) <= 8 * MAX_SIZE


# --- found by the attacker review ------------------------------------------------------------

_PUNY = "".join(chr(c) for c in range(0x100, 0x100 + 300))
"""300 distinct non-ASCII characters: punycode's encoder is quadratic in them (30,000 of
them, well under the size limit, ran for over two minutes)."""

UNCHARGED: dict[str, tuple[str, dict[str, Any]]] = {
    "int filter builds a huge int": ("{{ ('f' * 2000) | int(base=16) > 0 }}", {}),
    "int.from_bytes builds a huge int": (
        "{{ (1).from_bytes(('x' * 2000).encode(), 'big') > 0 }}",
        {},
    ),
    "punycode encode": ("{{ $input.main.s.encode('punycode') | length }}", {"s": _PUNY}),
    "punycode decode": ("{{ ('a-' ~ '9' * 2000).encode().decode('punycode') }}", {}),
    "scans of the receiver": (
        "{% set s = 'a' * 999999 %}{% for i in range(20) %}{{ s.isidentifier() }}{% endfor %}",
        {},
    ),
    "slices in a loop": (
        "{% set s = 'a' * 999999 %}{% for i in range(20) %}{{ s[::-1] | length }}{% endfor %}",
        {},
    ),
    "an idna encode (punycode inside)": ("{{ 'a'.encode('idna') }}", {}),
}
"""Work the limits do not see, each shown here at a size that is quick without a fix.

- ``|int(base=16)`` and ``int.from_bytes`` build integers of millions of bits (MAX_INT_BITS
  bounds only ``*`` and ``**``); ``//`` and ``%`` on two of them take seconds each at one
  step, so ``{% for i in range(1000) %}{{ a // b > 0 }}{% endfor %}`` runs for hours.
- Python's punycode codec is quadratic: one ``encode``/``decode`` of a string within the
  size limit runs for minutes.
- A method call charged its arguments and result, not the string it scans: 4,900 calls of
  ``s.isidentifier()`` (or ``count``, ``find``, ``isprintable``...) on a 1,000,000-character
  string cost 98,000 steps and 10-15 s. Slices (``s[::-1]``), which Jinja compiles natively,
  were not charged either.
"""


@pytest.mark.parametrize("name", list(UNCHARGED))
def test_work_the_limits_do_not_see_is_refused(name: str) -> None:
    """Each fails as a limit (or sandbox) TemplateError naming the param."""
    text, inputs = UNCHARGED[name]
    error = refused({"p": text}, trace=False, **inputs)
    assert error.path == "p"
    assert "limit" in error.message or "sandbox" in error.message, error.message


def test_strftime_with_a_long_format_is_refused() -> None:
    """``strftime`` takes a format of at most ``MAX_DATE_FORMAT`` characters too (its C
    buffer grows with the format); a short one works as before."""
    scope = {"now": datetime(2030, 1, 1, tzinfo=timezone.utc)}
    long = compile_params({"p": "{{ $now.strftime('%Y' * 600) }}"})
    short = compile_params({"p": "{{ $now.strftime('%Y') }}"})
    assert long is not None
    assert short is not None
    with pytest.raises(TemplateError) as info:
        long.render(scope)
    assert info.value.path == "p"
    assert f"over the template limit of {MAX_DATE_FORMAT:,}" in info.value.message
    assert short.render(scope) == {"p": "2030"}


def test_strptime_with_a_long_format_is_refused() -> None:
    """``$now.strptime`` walks its format quadratically in CPython's ``_strptime``: a format
    of 600,000 characters ('a%' * 300,000) ran for over two minutes. Refuse long formats
    (or ``strptime``); this 6,000-character one is quick today and parses."""
    compiled = compile_params({"p": "{{ $now.strptime('%' * 3000, '%%' * 3000) }}"})
    assert compiled is not None
    with pytest.raises(TemplateError) as info:
        compiled.render({"now": datetime.now(timezone.utc)})
    assert "limit" in info.value.message or "sandbox" in info.value.message


DEEP_SOURCES = {
    "parentheses": "{{ " + "(" * 500 + "1" + ")" * 500 + " }}",
    "a long sum": "{{ " + " + ".join(["1"] * 3000) + " }}",
    "a long filter chain": "{{ [1]" + " | batch(1) | list" * 300 + " }}",
    "nested loops": "{% for a in [1] %}" * 200 + "{% endfor %}" * 200,
}


@pytest.mark.parametrize("name", list(DEEP_SOURCES))
def test_a_deeply_nested_template_is_a_template_error(name: str) -> None:
    """These raise RecursionError (or IndentationError from Python's compiler) out of
    ``compile_params``: ``prana run`` and ``Runner.start`` end in a deep traceback instead of
    one line naming the param."""
    with pytest.raises(TemplateError) as info:
        compile_params({"p": DEEP_SOURCES[name]})
    assert info.value.path == "p"


class _CountingText(str):
    """A template text that counts the characters ``find`` scans (what a search costs)."""

    scanned = 0

    def find(self, sub: str, start: Any = None, end: Any = None) -> int:
        begin = 0 if start is None else start
        found = str.find(self, sub, begin)
        _CountingText.scanned += (len(self) if found < 0 else found) - begin
        return found


def test_compiling_many_expressions_scans_the_text_a_bounded_number_of_times() -> None:
    """``rewrite_template`` searched the rest of the text for each opener at every block,
    so a text of n blocks cost n times its length: '{{ 1 }}' * 140,000 (980 KB, within the
    CLI's 10 MiB file limit) took 178 s to validate. Linear: a few passes over the text."""
    from prana._template_compile import rewrite_template

    text = _CountingText("{{ 1 }}" * 2000)
    _CountingText.scanned = 0
    rewrite_template(text)
    assert _CountingText.scanned <= 10 * len(text)
