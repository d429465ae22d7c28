"""The light resume's fast paths (issue 11): each test fails if one stops applying.

A due timer (``wait.wait``) or retry resumes a record that holds little; these paths skip
work whose result is known. No timings: each test checks that a path applies where it
should, and that its result is the one the general path gives.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import attrs
import pytest
from doubles import T0
from hypothesis import given
from hypothesis import strategies as st

import prana._jsoncheck
import prana._scope
from prana import (
    ActionContext,
    Completed,
    Connection,
    ExecutionStatus,
    Failed,
    Node,
    NodeSettings,
    Registry,
    Suspend,
    TimerData,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._jsoncheck import _shared, shared_json
from prana._model import new_suspend
from prana._noderuns import NodeRuns
from prana._templates import TemplateError, compile_params
from prana.testing import ManualClock


def _timers_workflow(schedule_at: str = "{{ $input.main.at }}") -> Workflow:
    """The timers bench's workflow: trigger -> wait until the input's time -> a node."""
    return Workflow(
        id="timers",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "schedule", "schedule_at": schedule_at},
            ),
            Node(key="after", type="data.set_data", params={"value": {"done": True}}),
        ],
        connections=[
            Connection(from_node="start", to_node="wait"),
            Connection(from_node="wait", to_node="after"),
        ],
    )


class CountingScope:
    """``template_scope`` wrapped to count its calls (the general render builds one)."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = prana._scope.template_scope

    def __call__(self, run: Any, ctx: Any) -> dict[str, Any]:
        self.calls += 1
        return self.real(run, ctx)


@pytest.fixture
def scopes(monkeypatch: pytest.MonkeyPatch) -> CountingScope:
    counting = CountingScope()
    monkeypatch.setattr(prana._scope, "template_scope", counting)
    return counting


def test_a_due_timer_walks_its_params_without_building_the_scope(
    registry: Registry, scopes: CountingScope
) -> None:
    """The timers bench's wait names ``$input.main.at`` only: starting and resuming it (from
    ``loads``) render its params by walking the path, and record the same params."""
    at = (T0 + timedelta(minutes=5)).isoformat()
    wf = _timers_workflow()
    graph_params = compile_params(wf.nodes[1].params)
    assert graph_params is not None
    assert graph_params.walks
    paused = execute_workflow(wf, {"at": at}, registry=registry, clock=ManualClock(T0))
    assert isinstance(paused, Suspend)
    assert paused.kind == "timer"
    assert paused.execution is not None
    done = resume_workflow(
        loads(dumps(paused.execution)),
        workflow=wf,
        registry=registry,
        clock=ManualClock(T0 + timedelta(minutes=6)),
    )
    assert isinstance(done, Completed)
    assert scopes.calls == 0
    wait = done.execution.node_executions["wait"][-1]
    assert wait.params == {"mode": "schedule", "schedule_at": at}
    assert wait.output == {"at": at}


def test_a_path_the_walk_cannot_follow_renders_and_fails_as_before(
    registry: Registry, scopes: CountingScope
) -> None:
    """A missing key: the walk gives up, the general render runs (one scope) and the node
    fails with the error that render raises, naming the param."""
    wf = _timers_workflow("{{ $input.main.when }}")
    failed = execute_workflow(wf, {"at": "soon"}, registry=registry, clock=ManualClock(T0))
    assert isinstance(failed, Failed)
    assert scopes.calls == 1
    template = compile_params(wf.nodes[1].params)
    assert template is not None
    with pytest.raises(TemplateError) as raised:
        template.render({"input": {"main": {"at": "soon"}}})
    assert failed.error.code == "template_error"
    assert failed.error.message == f"params.{raised.value.path}: {raised.value.message}"


def test_a_hand_edited_input_is_read_again_on_resume(
    registry: Registry, scopes: CountingScope
) -> None:
    """The walk reads the input rebuilt at resume, not the params the record kept: an
    upstream output changed by hand is what the resumed wait records (as the render did)."""
    at = (T0 + timedelta(minutes=5)).isoformat()
    wf = _timers_workflow()
    paused = execute_workflow(wf, {"at": at}, registry=registry, clock=ManualClock(T0))
    assert paused.execution is not None
    execution = paused.execution
    start = execution.node_executions["start"][0]
    edited = {"at": "edited"}
    runs = dict(execution.node_executions)
    runs["start"] = (attrs.evolve(start, output=edited),)
    execution = attrs.evolve(execution, node_executions=runs)
    done = resume_workflow(
        execution, workflow=wf, registry=registry, clock=ManualClock(T0 + timedelta(minutes=6))
    )
    assert done.execution.status is ExecutionStatus.COMPLETED
    assert done.execution.node_executions["wait"][-1].params["schedule_at"] == "edited"
    assert scopes.calls == 0


@pytest.mark.parametrize(
    ("params", "walks"),
    [
        ({"a": "{{ $input.main.at }}", "b": ["{{ $vars.x }}", 1], "c": "plain"}, True),
        (["{{ $input.main[0] }}", {"k": "{{ $input.main['a b'] }}"}], True),
        ("{{ $input.main.at }}", False),  # params that are one string: not a dict or list
        ({"a": "{{ $now }}"}, False),
        ({"a": "{{ $env.HOME }}"}, False),
        ({"a": "{{ $nodes.start.output }}"}, False),
        ({"a": "{{ $execution.id }}"}, False),
        ({"a": "{{ $webhooks.wait }}"}, False),  # a lookup mints a token
        ({"a": "{{ $input.main.at }}", "b": "{{ $input.main.n + 1 }}"}, False),
        ({"a": "at {{ $input.main.at }}"}, False),  # text, not one expression
        ({"a": "{{ $input.main.at | upper }}"}, False),
    ],
)
def test_only_plain_paths_over_input_and_vars_are_walked(params: Any, walks: bool) -> None:
    """``walks`` holds exactly when every template is a plain path over ``$input`` or
    ``$vars`` in a dict or list of params: other roots build values, have side effects or
    change between calls."""
    template = compile_params(params)
    assert template is not None
    assert template.walks is walks


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
steps = st.lists(st.integers(0, 3) | st.sampled_from(["a", "b", "at", "items", "x y"]), max_size=3)


def _path(root: str, path: list[Any]) -> str:
    text = "".join(
        f"[{s}]" if isinstance(s, int) else (f".{s}" if s.isidentifier() else f"['{s}']")
        for s in path
    )
    return "{{ $" + root + text + " }}"


@given(json_values, json_values, steps, steps)
def test_a_walk_gives_what_the_render_gives(
    data: Any, variables: Any, first: list[Any], second: list[Any]
) -> None:
    """For any input and plain paths, the walk's params are the render's, or it defers to
    the render (which then may fail): never a different value."""
    params = {
        "a": _path("input", ["main", *first]),
        "b": [_path("vars", second), 2],
        "c": "plain",
    }
    template = compile_params(params)
    assert template is not None
    assert template.walks
    inputs = {"main": data}
    walked = template.walk(inputs, variables)
    try:
        rendered = template.render({"input": inputs, "vars": variables})
    except TemplateError:
        assert walked is None
        return
    if walked is not None:
        assert type(walked) is dict
        assert walked == rendered
        assert type(walked["b"]) is list


@pytest.mark.parametrize(
    "value",
    [
        {"mode": "schedule", "schedule_at": "2030-01-01T00:00:00+00:00"},
        {},
        {"n": 1, "f": 1.5, "t": True, "z": None, "s": "é"},
    ],
)
def test_flat_params_are_their_own_rendered_form(
    value: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dict of str keys and plain scalars comes back as itself, sized as the walk sizes
    it, without the walk (the fast path's rule: nothing in it to convert or share)."""
    size = _shared(value, {}, 0)[1]
    walks: list[Any] = []
    monkeypatch.setattr(prana._jsoncheck, "_shared", lambda *args: walks.append(args))
    result, fast_size = shared_json(value)
    assert walks == []
    assert result is value
    assert fast_size == size >= 0


class Text(str):
    """A str subclass: not a plain scalar."""


flat_values = st.dictionaries(
    st.text(max_size=3),
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=3)
    | st.builds(Text, st.text(max_size=2))
    | st.just(T0)
    | st.just(["x"])
    | st.just(math.inf),
    max_size=4,
)


@given(flat_values)
def test_shared_json_agrees_with_the_walk(value: dict[str, Any]) -> None:
    """The flat fast path gives the walk's rendered form and size for any dict, including
    surrogates, big ints, infinities, datetimes, subclasses and nested lists."""
    result, size = shared_json(value)
    walked, walked_size, _ = _shared(value, {}, 0)
    assert size == walked_size
    assert result == walked
    assert (result is value) == (walked is value)


def _fails_once(params: Any, ctx: ActionContext) -> Any:
    if ctx.attempt == 1:
        raise ConnectionError("down")
    return ctx.attempt


@pytest.mark.parametrize("kind", ["timer", "retry"])
def test_a_light_resume_leaves_the_source_run_unread(registry: Registry, kind: str) -> None:
    """A due timer or retry resumed from ``loads`` reads its input off the trigger's stored
    row (``NodeRuns.delivered``): the trigger's runs are never built, ``dumps`` writes its
    row back as read, and the result is the in-memory resume's."""
    registry.register("test.fails_once", _fails_once)
    if kind == "timer":
        wf = _timers_workflow()
        data: Any = {"at": (T0 + timedelta(minutes=5)).isoformat()}
    else:
        wf = Workflow(
            id="retry",
            nodes=[
                Node(key="start", type="manual.trigger"),
                Node(
                    key="after",
                    type="test.fails_once",
                    settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
                ),
            ],
            connections=[Connection(from_node="start", to_node="after")],
        )
        data = 7
    paused = execute_workflow(wf, data, registry=registry, clock=ManualClock(T0))
    assert isinstance(paused, Suspend)
    assert paused.kind == kind
    assert paused.execution is not None
    later = T0 + timedelta(minutes=6)
    direct = resume_workflow(
        paused.execution, workflow=wf, registry=registry, clock=ManualClock(later)
    )
    loaded = loads(dumps(paused.execution))
    done = resume_workflow(loaded, workflow=wf, registry=registry, clock=ManualClock(later))
    assert isinstance(done, Completed)
    runs = done.execution.node_executions
    assert type(runs) is NodeRuns
    assert type(runs.raw_items()["start"]) is list  # still the stored rows, unbuilt
    assert dumps(done.execution) == dumps(direct.execution)
    assert done.execution == direct.execution


# -- the engine's suspensions ----------------------------------------------------------------


@given(
    st.one_of(st.text(min_size=1), st.sampled_from(["timer", "retry", "webhook"])),
    st.one_of(
        st.none(),
        st.dictionaries(st.text(), st.integers()),
        st.just(TimerData(resume_at=T0)),
    ),
)
def test_suspends_init_refuses_nothing_new_suspend_builds(kind: str, data: Any) -> None:
    """The engine builds its suspensions with ``new_suspend``, a kind it checked already:
    ``Suspend.__init__`` must take any non-empty kind with any data (a check added there
    would be skipped), and build the same record."""
    built: Any = new_suspend(kind, data, None)
    assert Suspend(kind, data) == built
