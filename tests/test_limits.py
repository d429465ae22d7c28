"""What one execution runs and keeps is bounded by the application, never the definition.

A definition is untrusted data (DESIGN §7): its ``max_iterations`` had no ceiling, so a
loop with ``10**9`` ran for hours, and at the default three data-only nodes writing
1,000,000-character templates kept 1 GB in memory and a 3 GB record. ``Limits``, given to
the ``Registry``, holds every execution to a number of node runs and to sizes of what it
keeps; past one, the node fails with a non-retryable ``limit_exceeded`` naming the node,
the limit and how to raise it. Memory is measured with ``tracemalloc``; no test reads a clock.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc
from typing import Any

import pytest
from doubles import T0, conn, returning, trigger, value_node, workflow
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import plain_text

from prana import (
    ActionContext,
    Completed,
    ErrorCode,
    Failed,
    InvalidSettingsError,
    InvalidWorkflowError,
    Limits,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    Workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._limits import error_size, recorded_size
from prana.testing import ManualClock


def failed_on_a_limit(outcome: Any, key: str, limit: str) -> str:
    """Assert ``outcome`` failed node ``key`` on ``limit``; return the message."""
    assert isinstance(outcome, Failed), type(outcome).__name__
    error = outcome.error
    assert (error.code, error.node_key, error.type) == (
        ErrorCode.LIMIT_EXCEEDED,
        key,
        "LimitExceeded",
    )
    assert f"Limits.{limit}=" in error.message
    assert f"Registry(limits=Limits({limit}=...))" in error.message
    return error.message


def loop(*body: Node, limit: int = 10**12, max_iterations: int = 10**9) -> Workflow:
    """``start -> body... -> check -> body[0]`` until a counter in the state reaches ``limit``."""
    keys = [n.key for n in body]
    nodes = [
        trigger(),
        *body,
        Node(
            key="inc",
            type="workflow.set_state",
            params={"state": {"n": "{{ ($execution.state.n | default(0)) + 1 }}"}},
        ),
        Node(
            key="check",
            type="logic.if_condition",
            params={"condition": f"{{{{ $execution.state.n < {limit} }}}}"},
        ),
    ]
    path = ["start", *keys, "inc", "check"]
    edges = [conn(a, b) for a, b in itertools.pairwise(path)]
    edges.append(conn("check", keys[0], from_port="true"))
    return Workflow(id="loop", nodes=nodes, connections=edges, max_iterations=max_iterations)


PAUSE = {"mode": "interval", "duration": 1, "unit": "ms"}
"""A ``wait.wait`` of one millisecond: a suspension the test resumes by hand."""


# --- node runs ------------------------------------------------------------------------------


def test_the_application_sets_the_ceiling_on_node_runs() -> None:
    """With ``Limits(max_node_runs=50)`` a loop whose definition allows 10**9 iterations stops
    at the 51st node run, failing the execution as a runaway loop does."""
    registry = Registry(limits=Limits(max_node_runs=50))
    outcome = execute_workflow(loop(value_node("a", 1)), registry=registry)
    message = failed_on_a_limit(outcome, "inc", "max_node_runs")  # start, then a, inc, check...
    assert "node run 51 of this execution" in message
    assert outcome.execution.next_index == 50


def test_a_raised_ceiling_lets_a_longer_loop_finish() -> None:
    """The ceiling is the application's to raise: the same loop of 60 node runs completes."""
    registry = Registry(limits=Limits(max_node_runs=100))
    outcome = execute_workflow(loop(value_node("a", 1), limit=15), registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.execution.next_index == 1 + 15 * 3


def test_the_ceiling_holds_across_suspensions_and_reloads() -> None:
    """Node runs are counted in the record (``next_index``): a loop through a timer, reloaded
    from JSON at every pause, stops at the ceiling all the same."""
    clock = ManualClock(T0)
    registry = Registry(limits=Limits(max_node_runs=20))
    pause = Node(
        key="a", type="wait.wait", params={"mode": "interval", "duration": 1, "unit": "ms"}
    )
    wf = loop(pause)
    outcome = execute_workflow(wf, registry=registry, clock=clock)
    while isinstance(outcome, Suspend):
        clock.advance(1)
        outcome = resume_workflow(
            loads(dumps(outcome.execution)), workflow=wf, registry=registry, clock=clock
        )
    assert isinstance(outcome, Failed)
    assert outcome.error.code == ErrorCode.LIMIT_EXCEEDED
    assert outcome.execution.next_index == 20


# --- sizes ----------------------------------------------------------------------------------


def test_an_output_over_the_value_size_fails_the_node_without_a_retry() -> None:
    """An output of 101 characters under ``max_value_size=100`` is not kept; the failure is
    non-retryable whatever the policy, and ``on_error`` still decides."""
    registry = Registry(limits=Limits(max_value_size=100))
    registry.register("test.big", returning("x" * 101))
    policy = RetryPolicy(max_attempts=5)
    node = Node(key="big", type="test.big", settings=NodeSettings(retry=policy))
    outcome = execute_workflow(workflow(node), registry=registry)
    message = failed_on_a_limit(outcome, "big", "max_value_size")
    assert "its output has a size of 101 (characters, 8 per number" in message
    assert len(outcome.execution.node_executions["big"][0].attempts) == 1
    cont = Node(key="big", type="test.big", settings=NodeSettings(on_error="continue"))
    outcome = execute_workflow(workflow(cont), registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output["code"] == "limit_exceeded"


def test_params_over_the_value_size_fail_before_the_action_runs() -> None:
    """Rendered params are sized before the call: the action never sees them."""
    calls: list[Any] = []
    registry = Registry(limits=Limits(max_value_size=1000))
    registry.register("test.record", lambda params, ctx: calls.append(params))
    node = Node(key="rec", type="test.record", params={"text": "{{ 'y' * 2000 }}"})
    outcome = execute_workflow(workflow(node), registry=registry)
    message = failed_on_a_limit(outcome, "rec", "max_value_size")
    assert "its params has a size of 2,069" in message
    assert calls == []


def test_workflow_input_over_the_value_size_is_refused_before_anything_runs() -> None:
    """The input is the first thing an execution keeps: too big is a caller's mistake."""
    registry = Registry(limits=Limits(max_value_size=10))
    with pytest.raises(InvalidWorkflowError, match="max_value_size=10"):
        execute_workflow(workflow(value_node("a", 1)), "x" * 11, registry=registry)


def test_what_an_execution_keeps_is_capped_across_reloads() -> None:
    """``kept_size`` travels in the record: an execution that keeps 300 characters per pass
    through a timer, reloaded from JSON each time, stops at ``max_record_size``."""
    clock = ManualClock(T0)
    registry = Registry(limits=Limits(max_record_size=2_000))
    pause = Node(
        key="a", type="wait.wait", params={"mode": "interval", "duration": 1, "unit": "ms"}
    )
    wf = loop(pause, value_node("b", "{{ 'z' * 300 }}"))
    outcome = execute_workflow(wf, registry=registry, clock=clock)
    while isinstance(outcome, Suspend):
        text = dumps(outcome.execution)
        assert json.loads(text)["execution"]["kept_size"] == outcome.execution.kept_size
        clock.advance(1)
        outcome = resume_workflow(loads(text), workflow=wf, registry=registry, clock=clock)
    assert isinstance(outcome, Failed)
    key = outcome.error.node_key  # the node whose values cross the limit first
    assert key in {"a", "b", "inc", "check"}
    message = failed_on_a_limit(outcome, key, "max_record_size")
    assert "would take what this execution keeps to" in message
    assert outcome.execution.kept_size is not None
    # the limit's own error is kept (and counted) past it: nothing else is
    assert outcome.execution.kept_size <= 2_000 + error_size(outcome.error)


def test_a_record_without_kept_size_is_counted_when_it_resumes() -> None:
    """A record without ``kept_size`` (built by hand) is counted once from what it holds,
    then carried."""
    clock = ManualClock(T0)
    registry = Registry()
    pause = Node(
        key="a", type="wait.wait", params={"mode": "interval", "duration": 1, "unit": "ms"}
    )
    wf = workflow(value_node("v", "{{ 'q' * 50 }}"), pause, value_node("after", 1))
    outcome = execute_workflow(wf, {"in": "put"}, registry=registry, clock=clock)
    assert isinstance(outcome, Suspend)
    body = json.loads(dumps(outcome.execution))
    counted = body["execution"].pop("kept_size")
    old = loads(json.dumps(body))
    assert old.kept_size is None
    assert recorded_size(old) == counted
    clock.advance(1)
    resumed = resume_workflow(old, workflow=wf, registry=registry, clock=clock)
    fresh = resume_workflow(outcome.execution, workflow=wf, registry=registry, clock=clock)
    assert isinstance(resumed, Completed)
    assert resumed.execution.kept_size == fresh.execution.kept_size


def test_the_attackers_data_only_loop_is_stopped_within_bounded_memory() -> None:
    """Three data-only nodes writing 1,000,000-character templates in a loop kept 1 GB and a
    3 GB record at the default ``max_iterations``; under the default ``Limits`` the record
    cap stops it after a few passes, with memory and the record bounded."""
    writers = [value_node(k, "{{ 'w' * 999999 }}") for k in ("a", "b", "c")]
    wf = loop(*writers, max_iterations=1000)
    tracemalloc.start()
    try:
        outcome = execute_workflow(wf, registry=Registry())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, Failed)
    failed_on_a_limit(outcome, outcome.error.node_key or "", "max_record_size")
    assert outcome.execution.kept_size is not None
    assert outcome.execution.kept_size <= Limits().max_record_size
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MiB"


# --- params that name big data (the unbounded copy) ----------------------------------------------

BIG = list(range(50_000))
"""What an upstream node delivered: 50,000 items."""


def named_many_times(times: int) -> Workflow:
    """A node whose params name ``$input.main.big`` ``times`` times."""
    params = {f"p{i}": "{{ $input.main.big }}" for i in range(times)}
    return workflow(Node(key="use", type="test.keep", params=params))


def test_params_naming_big_input_share_it_instead_of_copying_it() -> None:
    """Forty params naming a 50,000-item input cost what the templates built, not eighty
    copies (two per name, about 30 MB, before); the record shares the input and counts
    every name."""
    seen: list[Any] = []

    def keep(params: Any, ctx: ActionContext) -> int:
        seen.append(params)
        return len(params)

    # 40 copies of 50,000 numbers: 18,000,000 as Limits counts them (each copy is loaded
    # on its own when the record is read), over the default max_value_size
    registry = Registry(limits=Limits(max_value_size=20_000_000))
    registry.register("test.keep", keep)
    wf = named_many_times(40)
    tracemalloc.start()
    try:
        outcome = execute_workflow(wf, {"big": BIG}, registry=registry)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, Completed)
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB"
    recorded = outcome.execution.node_executions["use"][0].params
    assert all(recorded[f"p{i}"] is BIG for i in range(40))
    assert seen[0]["p0"] is BIG
    assert outcome.execution.kept_size is not None
    assert outcome.execution.kept_size > 40 * 2 * len(BIG)


def test_params_naming_big_input_count_against_the_value_size() -> None:
    """Each name counts as the record will write it: 300 names of 50,000 numbers (100,000
    each: a number and its place in the list) are over the default ``max_value_size`` and
    fail before the action runs, in bounded memory."""
    registry = Registry()
    registry.register("test.keep", lambda params, ctx: pytest.fail("the action ran"))
    tracemalloc.start()
    try:
        outcome = execute_workflow(named_many_times(300), {"big": BIG}, registry=registry)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    failed_on_a_limit(outcome, "use", "max_value_size")
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB"


# --- the limits themselves ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_node_runs", "max_value_size", "max_record_size"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_limits_are_whole_numbers(field: str, bad: Any) -> None:
    """A limit is a whole number >= 1, and the error names it."""
    with pytest.raises(InvalidSettingsError, match=f"Limits.{field}="):
        Limits(**{field: bad})


def test_a_registry_takes_only_limits() -> None:
    """``Registry(limits=...)`` refuses anything else in one line."""
    with pytest.raises(InvalidSettingsError, match=r"prana\.Limits"):
        Registry(limits={"max_node_runs": 5})  # type: ignore[arg-type]
    assert Registry().limits == Limits()


# --- the count is the record's --------------------------------------------------------------


def _echo(params: Any, ctx: ActionContext) -> Any:
    return {"echo": params, "in": ctx.input.get("main")}


@settings(max_examples=60, deadline=None)
@example(["}}", "{#", ["{ {"]], "{{")  # braces that open no template; input is never one
@given(
    st.lists(
        st.one_of(
            plain_text(max_size=20),
            st.integers(min_value=0, max_value=9),
            st.lists(plain_text(max_size=5), max_size=4),
        ),
        min_size=1,
        max_size=6,
    ),
    st.one_of(
        st.none(), st.text(max_size=30), st.dictionaries(st.text(max_size=4), st.integers(0, 9))
    ),
)
def test_kept_size_is_what_the_record_holds(values: list[Any], data: Any) -> None:
    """The running count, made as values are made, equals a count of the finished record."""
    registry = Registry()
    registry.register("test.echo", _echo)
    nodes = []
    for i, value in enumerate(values):
        text = "<{{ $execution.run_index }}>"
        params: Any = {"v": value} if i % 2 else {"v": "{{ $input.main }}", "t": text, "k": value}
        nodes.append(Node(key=f"n{i}", type="test.echo", params=params))
    outcome = execute_workflow(workflow(*nodes), data, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.execution.kept_size == recorded_size(outcome.execution)


# --- recorded errors ------------------------------------------------------------------------


class _QuotingError(Exception):
    """An action error quoting its (long) URL in its message and its details, as
    ``http.request``'s ``HTTPStatusError`` does."""

    def __init__(self, url: str) -> None:
        self.details = {"status": 503, "url": url, "nested": {"url": url}}
        super().__init__(f"HTTP 503 from GET {url}")


def _failing(url: str) -> Any:
    def action(params: Any, ctx: ActionContext) -> Any:
        raise _QuotingError(url)

    return action


def test_recorded_errors_count_against_the_record_size_and_are_cut() -> None:
    """Every retry recorded another copy of the error, uncounted: a 65 KB URL reached a
    261 MB record after 2,000 attempts while the count stayed at 65,028. Each attempt's
    error is now cut (message, details) and counted, so the record stops near the limit:
    the node fails with ``limit_exceeded`` naming ``max_record_size``."""
    url = "https://a.test/" + "x" * 65_000
    limit = 400_000
    registry = Registry(limits=Limits(max_record_size=limit))
    registry.register("test.failing", _failing(url))
    policy = RetryPolicy(max_attempts=2_000, backoff="constant", initial_delay=0.001)
    wf = workflow(Node(key="call", type="test.failing", settings=NodeSettings(retry=policy)))
    clock = ManualClock(T0)
    outcome = execute_workflow(wf, registry=registry, clock=clock)
    attempts = 1
    while isinstance(outcome, Suspend):
        assert attempts < 2_000, "the record limit never stopped the retries"
        execution = loads(dumps(outcome.execution))
        assert len(dumps(execution)) < 2 * limit
        clock.advance(1)
        outcome = resume_workflow(execution, workflow=wf, registry=registry, clock=clock)
        attempts += 1
    message = failed_on_a_limit(outcome, "call", "max_record_size")
    assert "errors count" in message
    assert len(dumps(outcome.execution)) < 2 * limit
    assert outcome.execution.kept_size == recorded_size(outcome.execution)
    (run,) = outcome.execution.node_executions["call"]
    first = run.attempts[0].error
    assert first is not None
    assert len(first.message) < 2_100
    assert "more characters not kept" in first.message
    assert isinstance(first.details, dict)
    assert first.details["status"] == 503  # numbers survive the cut: conditions read them
    assert len(json.dumps(first.details)) < 4_100


# --- the count tracks what loading costs ----------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    ["empty lists", "empty dicts", "nested lists", "numbers", "floats", "small dicts", "text"],
)
def test_what_limits_count_tracks_what_loading_takes(shape: str) -> None:
    """Counted as one unit, an empty container took ~64 bytes once loaded: a record of
    151 MB of ``[[],[],...]`` was within the limits and took 4.5 GB and 20 s to load. Each
    unit counted now stands for at most 12 bytes of the value loaded from its JSON (short
    strings are the costliest: 10; containers and numbers 1-5)."""
    import orjson

    from prana._jsoncheck import json_size

    n = 100_000
    value: Any = {
        "empty lists": [[] for _ in range(n)],
        "empty dicts": [{} for _ in range(n)],
        "nested lists": [[[[]]] for _ in range(n)],
        "numbers": [10**12 + i for i in range(n)],
        "floats": [i + 0.5 for i in range(n)],
        "small dicts": [{"k": i} for i in range(n)],
        "text": [str(i) for i in range(n)],
    }[shape]
    text = orjson.dumps(value)
    del value
    tracemalloc.start()
    try:
        loaded = orjson.loads(text)
        taken, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    units = json_size(loaded)
    assert taken <= 12 * units, f"{taken / units:.1f} bytes per unit counted"
