"""The resume fast paths (issue 11) under hostile paths, values and records.

Each fast path must give what the general path it skips gives: the same params, output,
errors and audit trail. These properties drive them with what an attacker or a careless
definition writes (dunder and method names, private names, quoted keys with line breaks,
non-ASCII keys, indexes into dicts and tuples, values that are not JSON) and compare the
outcome with the fast path to the outcome with it turned off.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any
from unittest import mock

from doubles import T0
from hypothesis import given, settings
from hypothesis import strategies as st

from prana import (
    ActionContext,
    Connection,
    Node,
    Registry,
    Suspend,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._templates import CompiledParams, TemplateError, compile_params
from prana.testing import ManualClock

# Names that Jinja reads as attributes (methods, dunders, private names) or that a
# plain-path walk reads as keys; keys a quoted step names (a line break Jinja
# normalizes, a space, a digit, non-ASCII).
ATTRIBUTES = ["items", "keys", "mro", "__class__", "_private", "real", "upper", "at", "a"]
QUOTED = ["é", "a b", "a\r\nb", "a\nb", "0", "ключ", ""]

keys = st.sampled_from(ATTRIBUTES + QUOTED)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=4)
    | st.just(T0)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=10,
)
steps = st.lists(
    st.integers(0, 2) | st.sampled_from(ATTRIBUTES).map(lambda a: ("attr", a)) | keys, max_size=3
)


def _path(root: str, path: list[Any]) -> str:
    """A plain path: ``.name`` for ("attr", name), ``[i]`` for an index, ``["key"]`` else."""
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        elif isinstance(step, tuple):
            text += f".{step[1]}"
        else:
            text += f'["{step}"]'
    return "{{ $" + root + text + " }}"


def _outcome(template: CompiledParams, inputs: Any, variables: Any) -> tuple[str, Any]:
    try:
        return "ok", template.render({"input": inputs, "vars": variables})
    except TemplateError as exc:
        return "error", str(exc)


@given(values, values, steps, steps)
def test_a_hostile_path_walks_to_the_render_or_defers(
    data: Any, variables: Any, first: list[Any], second: list[Any]
) -> None:
    """Whatever the path names (a method, a dunder, a private name, a key with a line
    break, an index into a dict or tuple) and whatever the value (tuples, big ints, NaN,
    datetimes), the walk gives the render's params or defers to it: never other params,
    and never params where the render fails."""
    params = {"a": _path("input", ["main", *first]), "b": [_path("vars", second)]}
    template = compile_params(params)
    assert template is not None
    assert template.walks
    inputs = {"main": data}
    walked = template.walk(inputs, variables)
    kind, rendered = _outcome(template, inputs, variables)
    if walked is not None:
        assert kind == "ok"
        assert walked == rendered or repr(walked) == repr(rendered)  # NaN != NaN


def _echo(params: Any, ctx: ActionContext) -> Any:
    return {"params": params}


def _wait_then_echo(params: dict[str, Any]) -> Workflow:
    return Workflow(
        id="hostile",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="wait", type="wait.wait", params={"mode": "interval", "duration": 1}),
            Node(key="echo", type="test.echo_params", params=params),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="echo"),
        ],
        variables={"v": {"items": [1, 2], "_private": 3, "a\r\nb": 4, "é": 5}},
    )


def _resume_both_ways(wf: Workflow, data: Any) -> list[Any]:
    """The loaded timer resumed with the fast paths, then with the walk turned off."""
    registry = Registry()
    registry.register("test.echo_params", _echo)
    paused = execute_workflow(wf, data, registry=registry, clock=ManualClock(T0))
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    text = dumps(paused.execution)
    results = []
    for fast in (True, False):
        off = mock.patch.object(CompiledParams, "walk", return_value=None)
        with contextlib.nullcontext() if fast else off:
            done = resume_workflow(
                loads(text),
                workflow=wf,
                registry=registry,
                clock=ManualClock(T0 + timedelta(seconds=2)),
            )
        assert done.execution is not None
        # execution ids differ per run: keep what follows them (the runs, state, ...)
        recorded = dumps(done.execution).split('"node_executions"')[1]
        results.append((type(done).__name__, recorded, getattr(done, "error", None)))
    return results


json_keys = st.sampled_from(ATTRIBUTES + QUOTED)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(json_values, steps, steps)
def test_a_resumed_node_records_the_same_with_and_without_the_walk(
    data: Any, first: list[Any], second: list[Any]
) -> None:
    """A node after a due timer whose params are hostile plain paths over its input and the
    variables records the same run (params, output, error, audit trail) whether its
    params were walked or rendered."""
    wf = _wait_then_echo(
        {"a": _path("input", ["main", *first]), "b": [_path("vars", ["v", *second]), 1]}
    )
    fast, slow = _resume_both_ways(wf, data)
    assert fast == slow
