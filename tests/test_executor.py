"""The executor, driven step by step: each test checks the state after each step."""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Literal

import attrs
import pytest
from doubles import (
    T0,
    Flaky,
    chain,
    conn,
    if_node,
    raising,
    trigger,
    value_node,
    workflow,
)

from prana import (
    ActionContext,
    AttemptOutcome,
    Completed,
    Connection,
    Event,
    ExecutionStatus,
    Failed,
    InvalidWorkflowError,
    Limits,
    Node,
    NodeSettings,
    NodeStatus,
    NonRetryable,
    Outcome,
    Output,
    PranaError,
    Registry,
    ResumeError,
    RetryAfter,
    RetryData,
    RetryPolicy,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    WorkflowExecution,
    aexecute_workflow,
    aresume_workflow,
    cancel_execution,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana._decision import RetryExplanation, explain_retry
from prana._model import ErrorCode
from prana.shell import expire_webhook
from prana.testing import ManualClock


def run(wf: Workflow, inp: Any, registry: Registry, **kw: Any) -> Any:
    return execute_workflow(wf, inp, registry=registry, **kw)


# -- linear runs and records ---------------------------------------------------------------


def test_linear_chain_completes_with_last_output(registry: Registry) -> None:
    """A chain runs every node once, in order, and completes with the last node's output."""
    wf = Workflow(
        id="lin",
        nodes=[trigger(), Node(key="a", type="test.double"), Node(key="b", type="test.add")],
        connections=chain("start", "a", "b"),
    )
    outcome = run(wf, 5, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == 11
    ex = outcome.execution
    assert ex.status is ExecutionStatus.COMPLETED
    assert [r.node_key for r in ex.ordered_node_executions()] == ["start", "a", "b"]
    assert [r.execution_index for r in ex.ordered_node_executions()] == [0, 1, 2]
    assert all(len(runs) == 1 and runs[0].run_index == 0 for runs in ex.node_executions.values())
    b = ex.node_executions["b"][0]
    assert b.status is NodeStatus.COMPLETED
    assert b.output == 11
    assert b.output_port == "main"
    assert [a.outcome for a in b.attempts] == [AttemptOutcome.COMPLETED]
    assert ex.pending == ()


def test_node_executions_is_a_tuple_per_key(registry: Registry) -> None:
    """node_executions maps each key to a tuple of NodeExecution, oldest first."""
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="a", type="test.double")],
        connections=chain("start", "a"),
    )
    ex = run(wf, 1, registry).execution
    assert isinstance(ex.node_executions["a"], tuple)
    assert ex.node("a") is ex.node_executions["a"][-1]
    assert ex.node("missing") is None


def test_status_values_are_lowercase_strings() -> None:
    """Statuses are enum members whose values are lowercase strings."""
    assert ExecutionStatus.COMPLETED.value == "completed"
    assert NodeStatus.SUSPENDED.value == "suspended"


def test_clock_stamps_every_record(registry: Registry, clock: ManualClock) -> None:
    """Every timestamp comes from the injected clock."""
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="a", type="test.double")],
        connections=chain("start", "a"),
    )
    ex = run(wf, 1, registry, clock=clock).execution
    assert ex.started_at == T0
    assert ex.completed_at == T0
    assert ex.node_executions["a"][0].attempts[0].started_at == T0


# -- routing ---------------------------------------------------------------------------


def if_workflow(condition: Any) -> Workflow:
    return Workflow(
        id="if",
        nodes=[
            trigger(),
            Node(key="check", type="logic.if_condition", params={"condition": condition}),
            Node(key="yes", type="test.echo", params={"branch": "yes"}),
            Node(key="no", type="test.echo", params={"branch": "no"}),
        ],
        connections=[
            conn("start", "check"),
            conn("check", "yes", from_port="true"),
            conn("check", "no", from_port="false"),
        ],
    )


@pytest.mark.parametrize(("value", "taken", "skipped"), [(10, "yes", "no"), (1, "no", "yes")])
def test_if_condition_routes_by_port(
    registry: Registry, value: int, taken: str, skipped: str
) -> None:
    """An IF node completes on port true or false and only that branch runs."""
    outcome = run(if_workflow("{{ $input.main.n > 5 }}"), {"n": value}, registry)
    assert isinstance(outcome, Completed)
    ex = outcome.execution
    assert ex.node_executions["check"][0].output_port == ("true" if taken == "yes" else "false")
    assert taken in ex.node_executions
    assert skipped not in ex.node_executions
    assert outcome.output["params"] == {"branch": taken}


def test_switch_routes_to_first_matching_case(registry: Registry) -> None:
    """A switch completes on the port of its first matching case."""
    wf = Workflow(
        id="sw",
        nodes=[
            trigger(),
            Node(
                key="sw",
                type="logic.switch",
                params={
                    "cases": [
                        {"condition": "{{ $input.main.kind == 'a' }}", "port": "a"},
                        {"condition": "{{ $input.main.kind == 'b' }}", "port": "b"},
                    ]
                },
            ),
            Node(key="on_a", type="test.echo", params={"got": "a"}),
            Node(key="on_b", type="test.echo", params={"got": "b"}),
        ],
        connections=[conn("start", "sw"), conn("sw", "on_a", "a"), conn("sw", "on_b", "b")],
    )
    outcome = run(wf, {"kind": "b"}, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output["params"] == {"got": "b"}
    assert "on_a" not in outcome.execution.node_executions


def test_custom_port_output(registry: Registry) -> None:
    """An action picks its port with Output(value, port=...)."""
    registry.register("test.route", lambda p, ctx: Output("x", port="left"))
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="r", type="test.route"), Node(key="l", type="test.echo")],
        connections=[conn("start", "r"), conn("r", "l", from_port="left")],
    )
    outcome = run(wf, None, registry)
    assert outcome.output == {"params": {}, "input": {"main": "x"}}


def test_undeclared_port_is_a_non_retryable_failure(registry: Registry) -> None:
    """Completing on a port the action does not declare fails the node without retrying."""
    registry.register(
        "test.strict",
        lambda p, ctx: Output(1, port="nope"),
        output_ports=["ok"],
        retry=RetryPolicy(max_attempts=5, initial_delay=0),
    )
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="s", type="test.strict")],
        connections=chain("start", "s"),
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "invalid_port"


# -- merges ----------------------------------------------------------------------------


def test_diamond_merge_waits_for_both_branches(registry: Registry) -> None:
    """A node with two input ports runs once, after both branches delivered."""
    wf = Workflow(
        id="diamond",
        nodes=[
            trigger(),
            Node(key="left", type="test.double"),
            Node(key="right", type="test.add", params={"n": 100}),
            Node(key="merge", type="data.merge", params={"strategy": "append"}),
        ],
        connections=[
            conn("start", "left"),
            conn("start", "right"),
            conn("left", "merge", to_port="input_a"),
            conn("right", "merge", to_port="input_b"),
        ],
    )
    outcome = run(wf, 3, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == [6, 103]
    ex = outcome.execution
    assert len(ex.node_executions["merge"]) == 1
    order = [r.node_key for r in ex.ordered_node_executions()]
    assert order == ["start", "left", "right", "merge"]


def test_merge_after_skipped_branch_does_not_deadlock(registry: Registry) -> None:
    """A merge port whose only source is on the untaken branch no longer blocks the merge."""
    wf = Workflow(
        id="skip",
        nodes=[
            trigger(),
            Node(key="check", type="logic.if_condition", params={"condition": True}),
            Node(key="yes", type="test.double"),
            Node(key="no", type="test.add"),
            Node(key="merge", type="data.merge", params={"strategy": "append"}),
        ],
        connections=[
            conn("start", "check"),
            conn("check", "yes", from_port="true"),
            conn("check", "no", from_port="false"),
            conn("yes", "merge", to_port="input_a"),
            conn("no", "merge", to_port="input_b"),
        ],
    )
    outcome = run(wf, 4, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == [8]
    assert "no" not in outcome.execution.node_executions


def test_or_join_runs_once_per_delivery(registry: Registry) -> None:
    """Several edges into one port are an OR-join: the node runs each time a source delivers."""
    wf = Workflow(
        id="or",
        nodes=[
            trigger(),
            Node(key="a", type="test.double"),
            Node(key="b", type="test.add"),
            Node(key="sink", type="test.echo"),
        ],
        connections=[conn("start", "a"), conn("start", "b"), conn("a", "sink"), conn("b", "sink")],
    )
    outcome = run(wf, 10, registry)
    assert isinstance(outcome, Completed)
    sinks = outcome.execution.node_executions["sink"]
    assert [s.run_index for s in sinks] == [0, 1]
    assert [s.output["input"]["main"] for s in sinks] == [20, 11]


@pytest.mark.parametrize("join", ["c", "0join"])
def test_or_join_counts_deliveries_made_while_pending(registry: Registry, join: str) -> None:
    """A second delivery to a still-pending one-port node is a second run, whatever the keys."""
    wf = Workflow(
        id="or2",
        nodes=[
            trigger(),
            Node(key="a", type="test.double"),
            Node(key="b", type="test.add"),
            Node(key=join, type="test.echo"),
        ],
        connections=[conn("start", "a"), conn("a", "b"), conn("a", join), conn("b", join)],
    )
    outcome = run(wf, 1, registry)
    assert isinstance(outcome, Completed)
    runs = outcome.execution.node_executions[join]
    assert sorted(r.output["input"]["main"] for r in runs) == [2, 3]


def test_depth_first_order_ties_by_key(registry: Registry) -> None:
    """The most recently activated branch runs to its end before a sibling starts; ties by key."""
    wf = Workflow(
        id="dfs",
        nodes=[
            trigger(),
            Node(key="b1", type="test.double"),
            Node(key="a1", type="test.double"),
            Node(key="a2", type="test.double"),
        ],
        connections=[conn("start", "b1"), conn("start", "a1"), conn("a1", "a2")],
    )
    ex = run(wf, 1, registry).execution
    assert [r.node_key for r in ex.ordered_node_executions()] == ["start", "a1", "a2", "b1"]


def counting_loop(join_type: str) -> Workflow:
    """``a`` runs twice (a loop through ``chk``) and delivers to ``j`` each time."""
    return Workflow(
        id="or",
        nodes=[
            trigger(),
            Node(key="a", type="t.count"),
            if_node("chk", "{{ $execution.state.n < 2 }}"),
            Node(key="j", type=join_type, params={"mode": "webhook"}),
        ],
        connections=[
            conn("start", "a"),
            conn("a", "chk"),
            conn("chk", "a", "true"),
            conn("a", "j"),
        ],
    )


def count(params: Any, ctx: ActionContext) -> Any:
    ctx.update_state({"n": ctx.state.get("n", 0) + 1})
    return ctx.run_index


def test_or_join_each_queued_delivery_sees_its_own_output(registry: Registry) -> None:
    """Two deliveries from one looping source, queued while pending, each reach the join."""
    registry.register("t.count", count)
    outcome = execute_workflow(counting_loop("test.inputs"), None, registry=registry)
    assert isinstance(outcome, Completed)
    runs = outcome.execution.node_executions["j"]
    assert sorted(r.output["main"] for r in runs) == [0, 1]


def test_or_join_queued_while_pending_runs_after_the_loop_by_key_order(
    registry: Registry,
) -> None:
    """Depth-first with ties by key: the loop (chk < j) runs to its end before j runs twice."""
    registry.register("t.count", count)
    outcome = execute_workflow(counting_loop("test.inputs"), None, registry=registry)
    assert isinstance(outcome, Completed)
    order = [(r.node_key, r.run_index) for r in outcome.execution.ordered_node_executions()]
    assert order == [
        ("start", 0),
        ("a", 0),
        ("chk", 0),
        ("a", 1),
        ("chk", 1),
        ("j", 0),
        ("j", 1),
    ]


@pytest.mark.parametrize(
    ("outer", "inner", "ports"),
    [
        (True, True, {"a": "x", "c": "z"}),
        (True, False, {"c": "z"}),
        (False, True, {"b": "y", "c": "z"}),
        (False, False, {"b": "y", "c": "z"}),
    ],
)
def test_and_join_behind_nested_ifs_never_deadlocks(
    registry: Registry, outer: bool, inner: bool, ports: dict[str, str]
) -> None:
    """An AND-join runs once with the ports that got data when nested IFs skip the others."""
    wf = Workflow(
        id="nested",
        nodes=[
            trigger(),
            if_node("i1", outer),
            if_node("i2", inner),
            value_node("x", "x"),
            value_node("y", "y"),
            value_node("z", "z"),
            Node(key="m", type="test.inputs"),
        ],
        connections=[
            conn("start", "i1"),
            conn("i1", "i2", "true"),
            conn("i2", "x", "true"),
            conn("x", "m", to_port="a"),
            conn("i1", "y", "false"),
            conn("y", "m", to_port="b"),
            conn("start", "z"),
            conn("z", "m", to_port="c"),
        ],
    )
    outcome = execute_workflow(wf, None, registry=registry)
    assert isinstance(outcome, Completed)
    assert [r.output for r in outcome.execution.node_executions["m"]] == [ports]


def test_node_with_and_join_inside_a_loop(registry: Registry) -> None:
    """A node that is both an AND-join and in a loop waits once, then runs once per pass."""
    wf = Workflow(
        id="andloop",
        nodes=[
            trigger(),
            value_node("z", "z"),
            Node(
                key="inc",
                type="workflow.set_state",
                params={"state": {"n": "{{ ($execution.state.n | default(0)) + 1 }}"}},
            ),
            Node(key="m", type="test.inputs"),
            if_node("chk", "{{ $execution.state.n < 3 }}"),
            value_node("done", "{{ $execution.state.n }}"),
        ],
        connections=[
            conn("start", "inc"),
            conn("start", "z"),
            conn("z", "m", to_port="b"),
            conn("inc", "m", to_port="a"),
            conn("m", "chk"),
            conn("chk", "inc", "true"),
            conn("chk", "done", "false"),
        ],
    )
    outcome = execute_workflow(wf, 1, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == 3
    runs = outcome.execution.node_executions["m"]
    assert [r.run_index for r in runs] == [0, 1, 2]
    assert runs[0].output == {"a": 1, "b": "z"}  # the first pass waited for z
    assert [sorted(r.output) for r in runs[1:]] == [["a"], ["a"]]
    order = [r.node_key for r in outcome.execution.ordered_node_executions()]
    assert order[:4] == ["start", "inc", "z", "m"]


# -- loops -----------------------------------------------------------------------------


def counter_loop(limit: int, max_iterations: int = 1000) -> Workflow:
    return Workflow(
        id="loop",
        max_iterations=max_iterations,
        nodes=[
            trigger(),
            Node(
                key="inc",
                type="workflow.set_state",
                params={"state": {"counter": "{{ ($execution.state.counter | default(0)) + 1 }}"}},
            ),
            Node(
                key="check",
                type="logic.if_condition",
                params={"condition": f"{{{{ $execution.state.counter < {limit} }}}}"},
            ),
            Node(
                key="done", type="data.set_data", params={"value": "{{ $execution.state.counter }}"}
            ),
        ],
        connections=[
            conn("start", "inc"),
            conn("inc", "check"),
            conn("check", "inc", from_port="true"),
            conn("check", "done", from_port="false"),
        ],
    )


def test_counter_loop_gives_each_pass_a_run_index(registry: Registry) -> None:
    """A loop re-runs its nodes, each pass with the next run_index, until the exit branch."""
    outcome = run(counter_loop(3), None, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == 3
    ex = outcome.execution
    assert [r.run_index for r in ex.node_executions["inc"]] == [0, 1, 2]
    assert ex.state == {"counter": 3}


def test_loop_guard_fails_a_runaway_loop(registry: Registry) -> None:
    """A loop that never ends fails with iteration_limit once a node would pass max_iterations."""
    outcome = run(counter_loop(10_000, max_iterations=5), None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "iteration_limit"
    assert outcome.error.node_key == "inc"
    assert len(outcome.execution.node_executions["inc"]) == 5
    assert outcome.execution.status is ExecutionStatus.FAILED


class _Runaway(BaseException):
    """Ends the test's own loop when the executor does not (not an Exception: the executor
    records those as the node's failure and would go on)."""


RUNAWAY_RUNS = 10_000
"""Ten times the default ``max_iterations``: past it, nothing bounded the loop."""


def test_a_definition_cannot_lift_the_bound_on_its_own_loops() -> None:
    """``max_iterations`` comes from the definition, which is untrusted data (DESIGN §7), and
    has no ceiling: with 10**9 a two-node loop ran 200,000 node runs in 9 s, memory growing
    with every run, and would go on for hours. Even at the default 1000, a loop of three
    data-only nodes each writing a 1,000,000-character template kept 1 GB in memory and a
    3 GB record (6.7 GB to serialize it). The application, not the definition, must bound
    what one execution runs and keeps; here: this loop fails within 10,000 passes."""
    runs = [0]

    def tick(params: Any, ctx: ActionContext) -> None:
        runs[0] += 1
        if runs[0] > RUNAWAY_RUNS:
            raise _Runaway

    registry = Registry()
    registry.register("test.tick", tick)
    loop = attrs.evolve(counter_loop(10**12), max_iterations=10**9)
    nodes = [attrs.evolve(n, type="test.tick") if n.key == "done" else n for n in loop.nodes]
    nodes.append(Node(key="tick", type="test.tick"))
    connections = [c for c in loop.connections if (c.from_node, c.to_node) != ("inc", "check")]
    connections += [conn("inc", "tick"), conn("tick", "check")]
    looping = attrs.evolve(loop, nodes=nodes, connections=connections)
    try:
        outcome = execute_workflow(looping, registry=registry)
    except _Runaway:
        pytest.fail(f"{RUNAWAY_RUNS:,} runs of one node and the loop goes on")
    assert isinstance(outcome, Failed)
    assert outcome.error.code == ErrorCode.LIMIT_EXCEEDED
    assert "Limits.max_node_runs=10,000" in outcome.error.message
    assert "max_iterations cannot lift" in outcome.error.message
    assert outcome.execution.next_index == Limits().max_node_runs


def test_for_each_runs_body_per_item(registry: Registry) -> None:
    """for_each emits each item on loop, collects the body's outputs and finishes on done."""
    registry.register("test.square", lambda p, ctx: ctx.input["main"]["item"] ** 2)
    wf = Workflow(
        id="fe",
        nodes=[
            trigger(),
            Node(key="each", type="core.for_each", params={"collection": "{{ $input.main }}"}),
            Node(key="square", type="test.square"),
            Node(key="after", type="test.echo"),
        ],
        connections=[
            conn("start", "each"),
            conn("each", "square", from_port="loop"),
            conn("square", "each"),
            conn("each", "after", from_port="done"),
        ],
    )
    outcome = run(wf, [1, 2, 3], registry)
    assert isinstance(outcome, Completed)
    assert outcome.output["input"]["main"]["results"] == [1, 4, 9]
    assert len(outcome.execution.node_executions["square"]) == 3


# -- pauses ----------------------------------------------------------------------------


def wait_workflow(params: dict[str, Any]) -> Workflow:
    return Workflow(
        id="wait",
        nodes=[
            trigger(),
            Node(key="wait", type="wait.wait", params=params),
            Node(key="after", type="test.echo"),
        ],
        connections=chain("start", "wait", "after"),
    )


def test_webhook_wait_suspends_and_resume_data_becomes_output(
    registry: Registry, clock: ManualClock
) -> None:
    """A webhook wait suspends with WebhookData; resume data becomes its output on main."""
    wf = wait_workflow({"mode": "webhook", "timeout_hours": 2})
    outcome = run(wf, {"order": 1}, registry, clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "webhook"
    assert outcome.data == WebhookData(expires_at=T0 + timedelta(hours=2))
    ex = outcome.execution
    assert ex is not None
    assert ex.status is ExecutionStatus.SUSPENDED
    assert ex.suspended_node == "wait"
    assert ex.node_executions["wait"][0].status is NodeStatus.SUSPENDED
    assert ex.due_at == T0 + timedelta(hours=2)
    resumed = resume_workflow(ex, {"approved": True}, workflow=wf, registry=registry, clock=clock)
    assert isinstance(resumed, Completed)
    assert resumed.output["input"] == {"main": {"approved": True}}
    wait_run = resumed.execution.node_executions["wait"][0]
    assert wait_run.status is NodeStatus.COMPLETED
    assert [a.outcome for a in wait_run.attempts] == [AttemptOutcome.COMPLETED]


def test_timer_wait_suspends_until_due(registry: Registry, clock: ManualClock) -> None:
    """An interval wait suspends with TimerData at now + duration and passes input through."""
    wf = wait_workflow({"mode": "interval", "duration": 90, "unit": "seconds"})
    outcome = run(wf, {"x": 1}, registry, clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "timer"
    assert outcome.data == TimerData(resume_at=T0 + timedelta(seconds=90))
    assert outcome.execution is not None
    clock.advance(90)
    resumed = resume_workflow(
        outcome.execution, "ignored", workflow=wf, registry=registry, clock=clock
    )
    assert isinstance(resumed, Completed)
    assert resumed.output["input"] == {"main": {"x": 1}}


def test_resume_guards(registry: Registry) -> None:
    """Resuming a non-suspended execution, with another workflow or bad data raises ResumeError."""
    done = run(if_workflow(True), {}, registry)
    with pytest.raises(ResumeError, match="not suspended"):
        resume_workflow(done.execution, None, workflow=if_workflow(True), registry=registry)
    wf = wait_workflow({"mode": "webhook"})
    paused = run(wf, None, registry)
    assert paused.execution is not None
    other = attrs.evolve(wf, version=2)
    with pytest.raises(ResumeError, match="version"):
        resume_workflow(paused.execution, {}, workflow=other, registry=registry)
    with pytest.raises(ResumeError, match="JSON-native"):
        resume_workflow(paused.execution, {"when": T0}, workflow=wf, registry=registry)
    assert paused.execution.status is ExecutionStatus.SUSPENDED


def test_resume_checks_registry_too() -> None:
    """Resume validates the workflow against the registry: an unknown action type is refused."""
    reg = Registry()
    reg.register("test.pause", lambda p, ctx: Suspend("approval", {"ask": "boss"}))
    wf = Workflow(
        id="w", nodes=[trigger(), Node(key="p", type="test.pause")], connections=chain("start", "p")
    )
    paused = execute_workflow(wf, None, registry=reg)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    with pytest.raises(InvalidWorkflowError, match=r"unknown action type 'test\.pause'"):
        resume_workflow(paused.execution, {}, workflow=wf, registry=Registry())


def test_custom_suspend_kind_carries_json_data(registry: Registry) -> None:
    """An action's own kind suspends with its JSON data; resume data becomes the output."""
    registry.register("test.pause", lambda p, ctx: Suspend("approval", {"ask": "boss"}))
    wf = Workflow(
        id="w", nodes=[trigger(), Node(key="p", type="test.pause")], connections=chain("start", "p")
    )
    paused = run(wf, None, registry)
    assert isinstance(paused, Suspend)
    assert (paused.kind, paused.data) == ("approval", {"ask": "boss"})
    assert paused.execution is not None
    done = resume_workflow(paused.execution, "yes", workflow=wf, registry=registry)
    assert isinstance(done, Completed)
    assert done.output == "yes"


def test_action_may_not_suspend_as_retry(registry: Registry) -> None:
    """An action returning Suspend('retry') fails the node: retries belong to the policy."""
    registry.register("test.bad", lambda p, ctx: Suspend("retry", {}))
    wf = Workflow(
        id="w", nodes=[trigger(), Node(key="b", type="test.bad")], connections=chain("start", "b")
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "invalid_suspend"


@pytest.mark.parametrize(
    "data",
    [
        TimerData(resume_at=datetime(2030, 1, 1, 0, 0, 5)),  # naive  # noqa: DTZ001
        TimerData(resume_at="2030-01-01T00:00:05Z"),  # type: ignore[arg-type]
        TimerData(resume_at=None),  # type: ignore[arg-type]
        WebhookData(expires_at=datetime(2030, 1, 2)),  # noqa: DTZ001
        SubWorkflowData(workflow_id="child", expires_at=datetime(2030, 1, 2)),  # noqa: DTZ001
    ],
    ids=["timer-naive", "timer-text", "timer-none", "webhook-naive", "sub-workflow-naive"],
)
def test_an_actions_suspension_time_must_be_aware(registry: Registry, data: Any) -> None:
    """A built-in kind's time an action hands back (``TimerData`` is a hot record: no
    validator) is checked as it comes in: one that is not an aware datetime fails the node
    ``invalid_suspend``; it suspended, and the record ``dumps`` wrote did not read back."""
    kinds = {TimerData: "timer", WebhookData: "webhook", SubWorkflowData: "sub_workflow"}
    kind = kinds[type(data)]
    registry.register("test.pause", lambda p, ctx: Suspend(kind, data))
    wf = workflow(Node(key="p", type="test.pause"))
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "invalid_suspend"
    assert "aware" in outcome.error.message
    assert loads(dumps(outcome.execution)) == outcome.execution


def test_an_actions_aware_suspension_time_in_any_zone_suspends(registry: Registry) -> None:
    """An aware time in another zone is a valid timer (the check refuses only naive ones)."""
    at = datetime(2030, 1, 1, 5, 0, 5, tzinfo=timezone(timedelta(hours=5)))
    registry.register("test.pause", lambda p, ctx: Suspend("timer", TimerData(resume_at=at)))
    outcome = run(workflow(Node(key="p", type="test.pause")), None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


def test_execution_with_a_backlog_round_trips_and_resumes_identically(
    clock: ManualClock,
) -> None:
    """Two queued activations of one node survive dumps/loads, in order, and both still run."""
    registry = Registry()
    registry.register("t.count", count)
    wf = counting_loop("wait.wait")
    paused = execute_workflow(wf, None, registry=registry, clock=clock, execution_id="e1")
    assert isinstance(paused, Suspend)
    execution = paused.execution
    assert execution is not None
    assert [a.node_key for a in execution.pending] == ["j", "j"]
    reloaded = loads(dumps(execution))
    assert reloaded == execution
    results = []
    for start in (execution, reloaded):
        step: Outcome = resume_workflow(
            start, {"d": 1}, workflow=wf, registry=registry, clock=clock
        )
        assert isinstance(step, Suspend)
        assert step.execution is not None
        assert [a.node_key for a in step.execution.pending] == ["j"]
        step = resume_workflow(
            step.execution, {"d": 2}, workflow=wf, registry=registry, clock=clock
        )
        results.append(step)
    assert results[0] == results[1]
    assert isinstance(results[0], Completed)
    assert [r.output for r in results[0].execution.node_executions["j"]] == [{"d": 1}, {"d": 2}]


# -- retries ---------------------------------------------------------------------------


def retry_workflow(
    action_type: str, settings: NodeSettings, on_error_target: bool = False
) -> Workflow:
    nodes = [trigger(), Node(key="call", type=action_type, settings=settings)]
    connections = chain("start", "call")
    if on_error_target:
        nodes.append(Node(key="handler", type="test.echo"))
        connections.append(conn("call", "handler", from_port="error"))
    return Workflow(id="retry", nodes=nodes, connections=connections)


def test_retry_success_after_failures(registry: Registry, clock: ManualClock) -> None:
    """Each failure returns Suspend(kind='retry') with RetryData; the last attempt completes."""
    action = Flaky(2)
    registry.register("test.flaky", action)
    wf = retry_workflow(
        "test.flaky", NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=500)
    )
    outcome = run(wf, None, registry, clock=clock)
    for expected_attempt in (2, 3):
        assert isinstance(outcome, Suspend)
        assert outcome.kind == "retry"
        data = outcome.data
        assert isinstance(data, RetryData)
        assert data.attempt_number == expected_attempt
        assert data.max_attempts == 4
        assert data.retry_delay_ms == 500
        assert data.original_error.type == "ConnectionError"
        assert data.original_error.message == "down"
        assert data.resume_at == clock() + timedelta(milliseconds=500)
        assert outcome.execution is not None
        clock.advance(0.5)
        outcome = resume_workflow(
            outcome.execution, None, workflow=wf, registry=registry, clock=clock
        )
    assert isinstance(outcome, Completed)
    assert outcome.output == {"ok": True, "attempt": 3}
    assert action.attempts == [1, 2, 3]
    record = outcome.execution.node_executions["call"][0]
    assert len(outcome.execution.node_executions["call"]) == 1
    assert [a.number for a in record.attempts] == [1, 2, 3]
    assert [a.outcome for a in record.attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.FAILED,
        AttemptOutcome.COMPLETED,
    ]
    assert record.attempts[0].error is not None
    assert record.attempts[0].retry_delay_ms == 500
    assert record.attempts[1].due_at == T0 + timedelta(milliseconds=500)


def test_retry_exhaustion_fails_the_execution(registry: Registry, clock: ManualClock) -> None:
    """When attempts run out, stop_workflow fails the execution with the last error."""
    registry.register("test.flaky", Flaky(10))
    wf = retry_workflow(
        "test.flaky", NodeSettings(retry_on_failed=True, max_retries=2, retry_delay_ms=0)
    )
    events: list[Event] = []
    outcome = run(wf, None, registry, clock=clock, observers=[events.append])
    suspensions = 0
    while isinstance(outcome, Suspend):
        suspensions += 1
        assert outcome.execution is not None
        outcome = resume_workflow(
            outcome.execution,
            None,
            workflow=wf,
            registry=registry,
            clock=clock,
            observers=[events.append],
        )
    assert suspensions == 2
    assert isinstance(outcome, Failed)
    assert outcome.error.type == "ConnectionError"
    assert outcome.error.node_key == "call"
    record = outcome.execution.node_executions["call"][0]
    assert record.status is NodeStatus.FAILED
    assert len(record.attempts) == 3
    names = [e.name for e in events]
    assert names.count("node_retry_scheduled") == 2
    assert names[-3:] == ["node_retry_exhausted", "node_failed", "execution_failed"]


def _reworded(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Make every retry explanation the engine reads carry ``text``, keeping its reason."""
    real = explain_retry

    def reworded(*args: Any, **kwargs: Any) -> RetryExplanation:
        return attrs.evolve(real(*args, **kwargs), text=text)

    monkeypatch.setattr("prana._failure.explain_retry", reworded)


def test_retry_exhausted_follows_the_reason_not_its_wording(
    registry: Registry, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retries that ran out emit node_retry_exhausted whatever the explanation's text says."""
    _reworded(monkeypatch, "plus de tentatives")
    registry.register("test.down", Flaky(10))
    attempts = RetryPolicy(max_attempts=2, initial_delay=1)
    budget = RetryPolicy(max_attempts=None, retry_timeout=1.5, initial_delay=1, backoff="constant")
    for policy in (attempts, budget):  # each fails its second attempt, out of retries
        wf = retry_workflow("test.down", NodeSettings(retry=policy))
        events: list[Event] = []
        paused = run(wf, None, registry, clock=clock, observers=[events.append])
        assert isinstance(paused, Suspend)
        assert paused.execution is not None
        clock.advance(1)
        outcome = resume_workflow(
            paused.execution, workflow=wf, registry=registry, clock=clock, observers=[events.append]
        )
        assert isinstance(outcome, Failed)
        names = [e.name for e in events]
        assert names[-3:] == ["node_retry_exhausted", "node_failed", "execution_failed"]


def test_other_refusals_never_read_as_exhausted_whatever_their_wording(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal that is not "ran out" emits no node_retry_exhausted, even worded like one."""
    _reworded(monkeypatch, "attempts exhausted (1 of 1)")
    registry.register("test.bad", Flaky(1, lambda _call: KeyError("k")))
    wf = retry_workflow("test.bad", NodeSettings(retry=RetryPolicy()))
    events: list[Event] = []
    assert isinstance(run(wf, None, registry, observers=[events.append]), Failed)
    assert "node_retry_exhausted" not in [e.name for e in events]


def test_error_codes_are_stored_as_the_same_plain_strings(registry: Registry) -> None:
    """Records hold each code as a plain str, and JSON writes it exactly as before."""
    registry.register("test.odd", lambda p, ctx: {"when": {1, 2}})
    registry.register("test.refuse", Flaky(1, lambda _call: NonRetryable(ValueError("no"))))
    wf = Workflow(
        id="codes",
        nodes=[
            trigger(),
            Node(
                key="odd", type="test.odd", settings=NodeSettings(on_error="continue_error_output")
            ),
            Node(key="refuse", type="test.refuse", settings=NodeSettings(on_error="continue")),
        ],
        connections=[conn("start", "odd"), conn("odd", "refuse", from_port="error")],
    )
    outcome = run(wf, None, registry, execution_id="e1")
    assert isinstance(outcome, Completed)
    errors = [r.error for runs in outcome.execution.node_executions.values() for r in runs]
    codes = [e.code for e in errors if e is not None]
    assert codes == [ErrorCode.OUTPUT_NOT_JSON, ErrorCode.NON_RETRYABLE]
    assert {type(code) for code in codes} == {str}
    text = dumps(outcome.execution)
    assert '{"code":"output_not_json","type":"OutputNotJSON","module":"prana","message":' in text
    assert (
        '{"code":"non_retryable","type":"ValueError","module":"builtins","message":"no",'
        '"details":null,"node_key":"refuse","traceback":"Traceback (most recent call last):'
    ) in text
    assert dumps(loads(text)) == text


def test_zero_delay_retry_still_suspends(registry: Registry) -> None:
    """A 0 ms retry is still a suspension: the core never loops on its own."""
    registry.register("test.flaky", Flaky(1))
    wf = retry_workflow("test.flaky", NodeSettings(retry_on_failed=True, retry_delay_ms=0))
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 0


def test_retry_then_error_port(registry: Registry) -> None:
    """continue_error_output routes the error-shaped output to the error port after retries."""
    registry.register("test.flaky", Flaky(10))
    wf = retry_workflow(
        "test.flaky",
        NodeSettings(
            retry_on_failed=True, max_retries=1, retry_delay_ms=0, on_error="continue_error_output"
        ),
        on_error_target=True,
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    outcome = resume_workflow(outcome.execution, None, workflow=wf, registry=registry)
    assert isinstance(outcome, Completed)
    handled = outcome.output["input"]["main"]
    assert handled["code"] == "action_error"
    assert handled["message"] == "down"
    assert handled["details"]["type"] == "ConnectionError"
    record = outcome.execution.node_executions["call"][0]
    assert record.status is NodeStatus.COMPLETED
    assert record.output_port == "error"
    assert record.error is not None


def test_on_error_continue_completes_on_main(registry: Registry) -> None:
    """on_error=continue completes the failed node on main with the error-shaped output."""
    registry.register("test.boom", lambda p, ctx: (_ for _ in ()).throw(NonRetryable("nope")))
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="b", type="test.boom", settings=NodeSettings(on_error="continue")),
            Node(key="after", type="test.echo"),
        ],
        connections=chain("start", "b", "after"),
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output["input"]["main"]["code"] == "non_retryable"


@pytest.mark.parametrize(
    ("params", "action", "code"),
    [
        ({"x": "{{ $input.main.nothing + 1 }}"}, lambda p, ctx: 1, "template_error"),
        ({}, lambda p, ctx: {"when": datetime.now(timezone.utc)}, "output_not_json"),
        (
            {},
            lambda p, ctx: (_ for _ in ()).throw(NonRetryable(ConnectionError("x"))),
            "non_retryable",
        ),
    ],
    ids=["template", "output", "non_retryable"],
)
def test_what_never_retries(
    registry: Registry, params: dict[str, Any], action: Any, code: str
) -> None:
    """Template errors, non-JSON outputs and NonRetryable fail at once despite a retry policy."""
    registry.register("test.x", action)
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(
                key="x",
                type="test.x",
                params=params,
                settings=NodeSettings(retry_on_failed=True, max_retries=5),
            ),
        ],
        connections=chain("start", "x"),
    )
    outcome = run(wf, 1, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == code
    assert len(outcome.execution.node_executions["x"][0].attempts) == 1


def test_params_schema_mismatch_never_retries(registry: Registry) -> None:
    """Params that do not fit the action's schema fail the node, naming the field."""

    @attrs.define
    class Fetch:
        url: str
        retries: int = 0

    seen: list[Fetch] = []
    registry.register("test.fetch", lambda p, ctx: seen.append(p), params=Fetch)
    good = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="f", type="test.fetch", params={"url": "http://x", "retries": 2}),
        ],
        connections=chain("start", "f"),
    )
    assert isinstance(run(good, None, registry), Completed)
    assert seen == [Fetch(url="http://x", retries=2)]
    bad = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(
                key="f",
                type="test.fetch",
                params={"url": "x", "retries": "many"},
                settings=NodeSettings(retry_on_failed=True),
            ),
        ],
        connections=chain("start", "f"),
    )
    outcome = run(bad, None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "params_invalid"
    assert "retries" in outcome.error.message


def test_resume_callback_failure_never_retries(registry: Registry) -> None:
    """A failure in an action's resume callback fails the node without a retry."""

    def resume(p: Any, ctx: ActionContext, data: Any) -> Any:
        raise ConnectionError("resume broke")

    registry.register(
        "test.pause",
        lambda p, ctx: Suspend("approval", {}),
        resume=resume,
        retry=RetryPolicy(max_attempts=5, initial_delay=0),
    )
    wf = Workflow(
        id="w", nodes=[trigger(), Node(key="p", type="test.pause")], connections=chain("start", "p")
    )
    paused = run(wf, None, registry)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    outcome = resume_workflow(paused.execution, {}, workflow=wf, registry=registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "resume_error"
    assert outcome.error.message == "resume broke"


def test_retry_rebuilds_input_fresh_from_state(registry: Registry) -> None:
    """A retry re-runs the node with input rebuilt from the execution given to resume."""
    seen: list[Any] = []

    def action(p: Any, ctx: ActionContext) -> Any:
        seen.append((ctx.input["main"], p["tag"]))
        if len(seen) == 1:
            raise ConnectionError("first")
        return "ok"

    registry.register("test.watch", action)
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="up", type="test.double"),
            Node(
                key="watch",
                type="test.watch",
                params={"tag": "{{ $nodes.up.output }}"},
                settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
            ),
        ],
        connections=chain("start", "up", "watch"),
    )
    paused = run(wf, 2, registry)
    assert isinstance(paused, Suspend)
    ex = paused.execution
    assert ex is not None
    up = ex.node_executions["up"][0]
    edited = attrs.evolve(
        ex, node_executions={**ex.node_executions, "up": (attrs.evolve(up, output=40),)}
    )
    outcome = resume_workflow(edited, {"ignored": True}, workflow=wf, registry=registry)
    assert isinstance(outcome, Completed)
    assert seen == [(4, 4), (40, 40)]


def test_resume_never_mutates_its_input(registry: Registry) -> None:
    """resume_workflow returns a new execution and leaves the one it was given untouched."""
    registry.register("test.flaky", Flaky(1))
    wf = retry_workflow("test.flaky", NodeSettings(retry_on_failed=True, retry_delay_ms=0))
    paused = run(wf, None, registry)
    assert isinstance(paused, Suspend)
    ex = paused.execution
    assert ex is not None
    snapshot = attrs.asdict(ex, recurse=True)
    first = resume_workflow(ex, None, workflow=wf, registry=registry)
    assert attrs.asdict(ex, recurse=True) == snapshot
    assert first.execution is not ex
    assert ex.status is ExecutionStatus.SUSPENDED


def test_suspension_inside_retry_attempt_keeps_the_attempt(registry: Registry) -> None:
    """A pause during a retry attempt is no failure and does not use up an attempt."""
    calls: list[int] = []

    def action(p: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("flaky")
        return Suspend("approval", {"attempt": ctx.attempt})

    registry.register(
        "test.ask", action, resume=lambda p, ctx, data: {"answer": data, "attempt": ctx.attempt}
    )
    wf = retry_workflow(
        "test.ask", NodeSettings(retry_on_failed=True, max_retries=1, retry_delay_ms=0)
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "retry"
    assert outcome.execution is not None
    outcome = resume_workflow(outcome.execution, None, workflow=wf, registry=registry)
    assert isinstance(outcome, Suspend)
    assert outcome.kind == "approval"
    assert outcome.execution is not None
    outcome = resume_workflow(outcome.execution, "yes", workflow=wf, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == {"answer": "yes", "attempt": 2}
    record = outcome.execution.node_executions["call"][0]
    assert [a.number for a in record.attempts] == [1, 2]
    assert calls == [1, 2]


def test_idempotency_key_is_stable_across_retries(registry: Registry) -> None:
    """ctx.idempotency_key is execution:node:run_index, the same for every attempt."""
    keys: list[str] = []

    def action(p: Any, ctx: ActionContext) -> Any:
        keys.append(ctx.idempotency_key)
        if len(keys) < 3:
            raise ConnectionError("again")
        return None

    registry.register("test.keyed", action)
    wf = retry_workflow(
        "test.keyed", NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=0)
    )
    outcome = run(wf, None, registry, execution_id="ex-1")
    while isinstance(outcome, Suspend):
        assert outcome.execution is not None
        outcome = resume_workflow(outcome.execution, None, workflow=wf, registry=registry)
    assert keys == ["ex-1:call:0"] * 3


def test_retry_after_hint_sets_the_delay(registry: Registry) -> None:
    """RetryAfter(seconds) from an action sets the next delay, capped by max_delay."""
    registry.register("test.limited", Flaky(1, lambda call: RetryAfter(7)))
    wf = retry_workflow(
        "test.limited", NodeSettings(retry=RetryPolicy(max_attempts=3, max_delay=5))
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 5000


def test_programming_errors_do_not_retry_by_default(registry: Registry) -> None:
    """Under a policy's smart defaults a KeyError is not retried."""
    empty: dict[str, int] = {}
    registry.register("test.bug", lambda p, ctx: empty["missing"])
    wf = retry_workflow("test.bug", NodeSettings(retry=RetryPolicy(max_attempts=3)))
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.type == "KeyError"


def test_registry_default_policy_applies(registry: Registry) -> None:
    """An action registered with retry= retries when the node has no policy of its own."""
    registry.register("test.flaky", Flaky(1), retry=RetryPolicy(max_attempts=2, initial_delay=0.25))
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="call", type="test.flaky")],
        connections=chain("start", "call"),
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 250


def run_retries(
    wf: Workflow,
    registry: Registry,
    clock: ManualClock,
    observers: list[Any] | None = None,
) -> tuple[Outcome, list[RetryData]]:
    """Run ``wf`` and resume every retry suspension when it is due; return the end and the data."""
    outcome = execute_workflow(
        wf, None, registry=registry, clock=clock, observers=observers, execution_id="e1"
    )
    seen: list[RetryData] = []
    while isinstance(outcome, Suspend) and isinstance(outcome.data, RetryData):
        seen.append(outcome.data)
        clock.set(outcome.data.resume_at)
        outcome = resume_workflow(
            outcome.execution,
            None,
            workflow=wf,
            registry=registry,
            clock=clock,
            observers=observers,
        )
    return outcome, seen


def test_simple_form_gives_n_plus_one_attempts_constant_delay_and_retries_value_error(
    registry: Registry, clock: ManualClock
) -> None:
    """NodeSettings(retry_on_failed, max_retries=3) retries even ValueError, 4 attempts, 0.5s."""
    registry.register("t.bad", raising(ValueError("bad value")))
    settings = NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=500)
    wf = workflow(Node(key="x", type="t.bad", settings=settings))
    outcome, seen = run_retries(wf, registry, clock)
    assert isinstance(outcome, Failed)
    assert [(d.attempt_number, d.max_attempts, d.retry_delay_ms) for d in seen] == [
        (2, 4, 500),
        (3, 4, 500),
        (4, 4, 500),
    ]
    assert all(d.original_error.type == "ValueError" for d in seen)
    attempts = outcome.execution.node_executions["x"][0].attempts
    assert [a.number for a in attempts] == [1, 2, 3, 4]
    assert [a.due_at for a in attempts[1:]] == [d.resume_at for d in seen]


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ({}, None),
        ({"action": 2}, 2),
        ({"action": 2, "star": 3}, 3),
        ({"action": 2, "star": 3, "type": 4}, 4),
        ({"action": 2, "star": 3, "type": 4, "node": 5}, 5),
        ({"action": 2, "star": 3, "type": 4, "simple": True}, 6),
        ({"action": 0}, None),
        ({"action": 2, "star": 0}, None),
        ({"action": 2, "star": 3, "type": 0}, None),
        ({"action": 2, "star": 3, "type": 4, "node": 0}, None),
        ({"star": 0, "simple": True}, 6),
    ],
)
def test_policy_precedence_and_enabled_false_at_each_level(
    clock: ManualClock, levels: dict[str, Any], expected: int | None
) -> None:
    """Most specific level wins, no merging; enabled=False (given as 0) switches retry off there."""

    def policy(n: int) -> RetryPolicy:
        return RetryPolicy(max_attempts=n) if n else RetryPolicy(enabled=False)

    registry = Registry()
    registry.register(
        "test.down",
        raising(ConnectionError("down")),
        retry=policy(levels["action"]) if "action" in levels else None,
    )
    defaults = {}
    if "star" in levels:
        defaults["*"] = policy(levels["star"])
    if "type" in levels:
        defaults["test.down"] = policy(levels["type"])
    if "node" in levels:
        settings = NodeSettings(retry=policy(levels["node"]))
    elif levels.get("simple"):
        settings = NodeSettings(retry_on_failed=True, max_retries=5, retry_delay_ms=0)
    else:
        settings = NodeSettings()
    wf = workflow(Node(key="x", type="test.down", settings=settings), retry_defaults=defaults)
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    if expected is None:
        assert isinstance(outcome, Failed)
    else:
        assert isinstance(outcome, Suspend)
        assert isinstance(outcome.data, RetryData)
        assert outcome.data.max_attempts == expected


def test_retry_params_are_rerendered_and_resume_data_is_ignored(
    registry: Registry, clock: ManualClock
) -> None:
    """Each attempt renders params afresh ($execution.attempt, $now); retry ignores resume data."""
    seen: list[Any] = []

    def record(params: Any, ctx: ActionContext) -> Any:
        seen.append((params, ctx.attempt, ctx.now))
        if ctx.attempt < 2:
            raise ConnectionError("down")
        return params

    registry.register("t.rec", record)
    params = {"attempt": "{{ $execution.attempt }}", "at": "at {{ $now }}"}
    settings = NodeSettings(retry=RetryPolicy(initial_delay=2))
    wf = workflow(Node(key="x", type="t.rec", params=params, settings=settings))
    paused = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    clock.advance(2)
    junk = object()  # not JSON-native: a retry must not even look at it
    done = resume_workflow(paused.execution, junk, workflow=wf, registry=registry, clock=clock)
    assert isinstance(done, Completed)
    later = T0 + timedelta(seconds=2)
    assert seen == [
        ({"attempt": 1, "at": f"at {T0.isoformat()}"}, 1, T0),
        ({"attempt": 2, "at": f"at {later.isoformat()}"}, 2, later),
    ]
    assert done.execution.node_executions["x"][0].params == seen[-1][0]


def test_retry_timeout_stops_scheduling_at_the_budget(
    registry: Registry, clock: ManualClock
) -> None:
    """With retry_timeout=5s and 2s delays, retries run at 2s and 4s; 6s would pass the budget."""
    policy = RetryPolicy(max_attempts=None, backoff="constant", initial_delay=2, retry_timeout=5)
    wf = workflow(Node(key="x", type="test.down", settings=NodeSettings(retry=policy)))
    outcome, seen = run_retries(wf, registry, clock)
    assert isinstance(outcome, Failed)
    start = outcome.execution.node_executions["x"][0].started_at
    assert [d.resume_at - start for d in seen] == [timedelta(seconds=2), timedelta(seconds=4)]
    assert [d.max_attempts for d in seen] == [None, None]


class TickingClock:
    """A clock that moves 1 ms every time it is read, like a real one between two reads."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def test_retry_timeout_budget_holds_with_a_moving_clock(registry: Registry) -> None:
    """No retry is scheduled to start after first-attempt start + retry_timeout."""
    policy = RetryPolicy(
        max_attempts=None,
        backoff="constant",
        initial_delay=1,
        max_delay=2,
        retry_timeout=2,
        retry_when=lambda view: 2 - view.elapsed_seconds,  # wait out the whole budget
    )
    wf = workflow(Node(key="x", type="test.down", settings=NodeSettings(retry=policy)))
    outcome = execute_workflow(wf, None, registry=registry, clock=TickingClock())
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    start = outcome.execution.node_executions["x"][0].started_at
    assert isinstance(outcome.data, RetryData)
    assert outcome.data.resume_at <= start + timedelta(seconds=2)


@pytest.mark.parametrize(
    ("hint", "policy", "delay_ms"),
    [
        (100, RetryPolicy(max_delay=10), 10_000),
        (100, RetryPolicy(max_delay=10, hint_exceeds_max_delay=True), 100_000),
        (10**7, RetryPolicy(max_delay=10, hint_exceeds_max_delay=True), 86_400_000),
        (3, RetryPolicy(max_delay=10, retry_on=("ConnectionError",), exclude=()), None),
    ],
)
def test_retry_after_hint_is_capped(
    registry: Registry, clock: ManualClock, hint: float, policy: RetryPolicy, delay_ms: int | None
) -> None:
    """RetryAfter sets the delay, capped by max_delay unless opted out, never past a day."""
    registry.register("t.hint", raising(RetryAfter(hint)))
    wf = workflow(Node(key="x", type="t.hint", settings=NodeSettings(retry=policy)))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    if delay_ms is None:  # a retry_on filter that does not name RetryAfter: no retry
        assert isinstance(outcome, Failed)
    else:
        assert isinstance(outcome, Suspend)
        assert isinstance(outcome.data, RetryData)
        assert outcome.data.retry_delay_ms == delay_ms
        assert outcome.data.resume_at == T0 + timedelta(milliseconds=delay_ms)


def test_retry_on_result_polls_until_the_output_is_accepted(
    registry: Registry, clock: ManualClock
) -> None:
    """A rejected output is a failed attempt that retries; the accepted one completes the node."""
    registry.register("t.poll", lambda params, ctx: {"ready": ctx.attempt >= 3})
    policy = RetryPolicy(max_attempts=5, retry_on_result="{{ not $output.ready }}")
    wf = workflow(Node(key="x", type="t.poll", settings=NodeSettings(retry=policy)))
    outcome, seen = run_retries(wf, registry, clock)
    assert isinstance(outcome, Completed)
    assert outcome.output == {"ready": True}
    assert [d.retry_delay_ms for d in seen] == [1000, 2000]
    attempts = outcome.execution.node_executions["x"][0].attempts
    assert [(a.outcome, a.error.code if a.error else None) for a in attempts] == [
        (AttemptOutcome.FAILED, "result_rejected"),
        (AttemptOutcome.FAILED, "result_rejected"),
        (AttemptOutcome.COMPLETED, None),
    ]


@pytest.mark.parametrize(
    ("mode", "port"), [("continue", "main"), ("continue_error_output", "error")]
)
def test_on_error_output_shape_and_port(
    registry: Registry, mode: Literal["continue", "continue_error_output"], port: str
) -> None:
    """continue completes on main, continue_error_output on error, with {code, message, details}."""
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="x", type="test.down", settings=NodeSettings(on_error=mode)),
            value_node("ok", "main taken"),
            value_node("bad", "error taken"),
        ],
        connections=[conn("start", "x"), conn("x", "ok"), conn("x", "bad", "error")],
    )
    outcome = execute_workflow(wf, None, registry=registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == ("main taken" if port == "main" else "error taken")
    record = outcome.execution.node_executions["x"][0]
    assert record.status is NodeStatus.COMPLETED
    assert record.output_port == port
    assert record.output == {
        "code": "action_error",
        "message": "down",
        "details": {
            "type": "ConnectionError",
            "module": "builtins",
            "message": "down",
            "details": None,
        },
    }
    assert record.attempts[-1].outcome is AttemptOutcome.FAILED


# -- sub-workflows -----------------------------------------------------------------------


def test_sub_workflow_parent_resumes_with_child_output(registry: Registry) -> None:
    """A sub-workflow node suspends; the parent resumes with the child's output."""
    child = Workflow(
        id="child",
        nodes=[trigger(), Node(key="d", type="test.double")],
        connections=chain("start", "d"),
    )
    parent = Workflow(
        id="parent",
        nodes=[
            trigger(),
            Node(key="sub", type="workflow.execute_workflow", params={"workflow_id": "child"}),
            Node(key="after", type="test.add"),
        ],
        connections=chain("start", "sub", "after"),
    )
    paused = run(parent, 21, registry)
    assert isinstance(paused, Suspend)
    assert paused.kind == "sub_workflow"
    assert isinstance(paused.data, SubWorkflowData)
    assert paused.data.workflow_id == "child"
    assert paused.data.input == 21
    child_outcome = run(child, paused.data.input, registry)
    assert isinstance(child_outcome, Completed)
    assert paused.execution is not None
    done = resume_workflow(
        paused.execution,
        {"status": "completed", "output": child_outcome.output},
        workflow=parent,
        registry=registry,
    )
    assert isinstance(done, Completed)
    assert done.output == 43


def test_chained_sub_workflows(registry: Registry) -> None:
    """Two sub-workflow nodes in a row each suspend and resume in turn."""
    parent = Workflow(
        id="parent",
        nodes=[
            trigger(),
            Node(key="s1", type="workflow.execute_workflow", params={"workflow_id": "c"}),
            Node(
                key="s2",
                type="workflow.execute_workflow",
                params={"workflow_id": "c", "input": "{{ $input.main }}"},
            ),
        ],
        connections=chain("start", "s1", "s2"),
    )
    outcome = run(parent, 1, registry)
    seen: list[Any] = []
    while isinstance(outcome, Suspend):
        seen.append(outcome.data.input)
        assert outcome.execution is not None
        outcome = resume_workflow(
            outcome.execution,
            {"status": "completed", "output": outcome.data.input * 10},
            workflow=parent,
            registry=registry,
        )
    assert isinstance(outcome, Completed)
    assert seen == [1, 10]
    assert outcome.output == 100


def test_sub_workflow_failure_fails_parent_node(registry: Registry) -> None:
    """A failed child fails the parent's node (no retry), and on_error applies."""
    parent = Workflow(
        id="parent",
        nodes=[
            trigger(),
            Node(
                key="sub",
                type="workflow.execute_workflow",
                params={"workflow_id": "c"},
                settings=NodeSettings(retry_on_failed=True),
            ),
        ],
        connections=chain("start", "sub"),
    )
    paused = run(parent, None, registry)
    assert paused.execution is not None
    with pytest.raises(ResumeError, match="sub_workflow"):
        resume_workflow(paused.execution, {"status": "weird"}, workflow=parent, registry=registry)
    outcome = resume_workflow(
        paused.execution,
        {"status": "failed", "error": {"message": "bad"}},
        workflow=parent,
        registry=registry,
    )
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "sub_workflow_failed"
    assert "bad" in outcome.error.message


# -- events ----------------------------------------------------------------------------


def test_event_order_through_a_retry(registry: Registry) -> None:
    """Events follow the run: start, node events, retry scheduled, suspend, resume, complete."""
    registry.register("test.flaky", Flaky(1))
    wf = retry_workflow("test.flaky", NodeSettings(retry_on_failed=True, retry_delay_ms=0))
    events: list[Event] = []
    paused = run(wf, None, registry, observers=[events.append])
    assert paused.execution is not None
    resume_workflow(
        paused.execution, None, workflow=wf, registry=registry, observers=[events.append]
    )
    assert [(e.name, e.node_key, e.attempt) for e in events] == [
        ("execution_started", None, None),
        ("node_started", "start", 1),
        ("node_completed", "start", 1),
        ("node_started", "call", 1),
        ("node_retry_scheduled", "call", 2),
        ("execution_suspended", "call", None),
        ("execution_resumed", "call", None),
        ("node_started", "call", 2),
        ("node_completed", "call", 2),
        ("execution_completed", None, None),
    ]
    retry_event = events[4]
    assert retry_event.delay_ms == 0
    assert retry_event.error is not None
    assert retry_event.error.type == "ConnectionError"


def test_raising_observer_never_breaks_a_run(registry: Registry) -> None:
    """An observer that raises is skipped; the run and later observers go on."""
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("observer bug")

    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="a", type="test.double")],
        connections=chain("start", "a"),
    )
    outcome = run(wf, 2, registry, observers=[broken, lambda e: seen.append(e.name)])
    assert isinstance(outcome, Completed)
    assert seen[-1] == "execution_completed"


def names(events: list[Event]) -> list[tuple[str, str | None, int | None]]:
    return [(e.name, e.node_key, e.attempt) for e in events]


def test_events_through_suspend_and_resume(registry: Registry, clock: ManualClock) -> None:
    """A webhook pause emits node/execution suspended, then execution/node resumed on resume."""
    events: list[Event] = []
    wf = workflow(Node(key="w", type="wait.wait", params={"mode": "webhook"}))
    paused = execute_workflow(wf, 1, registry=registry, clock=clock, observers=[events.append])
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    resume_workflow(
        paused.execution, {"ok": 1}, workflow=wf, registry=registry, observers=[events.append]
    )
    assert names(events) == [
        ("execution_started", None, None),
        ("node_started", "start", 1),
        ("node_completed", "start", 1),
        ("node_started", "w", 1),
        ("node_suspended", "w", 1),
        ("execution_suspended", "w", None),
        ("execution_resumed", "w", None),
        ("node_resumed", "w", 1),
        ("node_completed", "w", 1),
        ("execution_completed", None, None),
    ]
    assert [e.kind for e in events if "suspended" in e.name or "resumed" in e.name] == [
        "webhook"
    ] * 4
    assert events[-2].output == {"ok": 1}


def test_events_on_retry_exhaustion(registry: Registry, clock: ManualClock) -> None:
    """Running out of attempts emits retry_exhausted, node_failed, execution_failed, in order."""
    events: list[Event] = []
    policy = RetryPolicy(max_attempts=2, initial_delay=1)
    wf = workflow(Node(key="x", type="test.down", settings=NodeSettings(retry=policy)))
    outcome, _ = run_retries(wf, registry, clock, observers=[events.append])
    assert isinstance(outcome, Failed)
    assert names(events)[-4:] == [
        ("node_started", "x", 2),
        ("node_retry_exhausted", "x", 2),
        ("node_failed", "x", 2),
        ("execution_failed", "x", None),
    ]
    scheduled = next(e for e in events if e.name == "node_retry_scheduled")
    assert (scheduled.attempt, scheduled.max_attempts, scheduled.delay_ms) == (2, 2, 1000)
    assert events[-2].error is not None
    assert events[-2].error.type == "ConnectionError"


def test_non_retryable_after_a_retry_is_not_reported_as_exhausted(
    registry: Registry, clock: ManualClock
) -> None:
    """A NonRetryable failure with attempts left emits node_failed but not retry_exhausted."""
    calls: list[int] = []

    def flaky_then_fatal(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("down")
        raise NonRetryable("fatal")

    registry.register("t.fatal", flaky_then_fatal)
    events: list[Event] = []
    policy = RetryPolicy(max_attempts=5, initial_delay=0)
    wf = workflow(Node(key="x", type="t.fatal", settings=NodeSettings(retry=policy)))
    outcome, _ = run_retries(wf, registry, clock, observers=[events.append])
    assert isinstance(outcome, Failed)
    assert calls == [1, 2]
    assert "node_retry_exhausted" not in [e.name for e in events]


# -- async, timeouts, cancel -----------------------------------------------------------


def test_async_and_sync_actions_in_one_workflow() -> None:
    """aexecute_workflow awaits async actions and calls sync ones, in one workflow."""
    reg = Registry()

    async def slow_double(p: Any, ctx: ActionContext) -> Any:
        await asyncio.sleep(0)
        return ctx.input["main"] * 2

    reg.register("test.adouble", slow_double)
    reg.register("test.inc", lambda p, ctx: ctx.input["main"] + 1)
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="a", type="test.adouble"), Node(key="b", type="test.inc")],
        connections=chain("start", "a", "b"),
    )
    outcome = asyncio.run(aexecute_workflow(wf, 5, registry=reg))
    assert isinstance(outcome, Completed)
    assert outcome.output == 11
    sync_outcome = execute_workflow(wf, 5, registry=reg)
    assert isinstance(sync_outcome, Completed)
    assert sync_outcome.output == 11


def test_async_retry_resume() -> None:
    """aresume_workflow resumes a retry suspension with async actions."""
    reg = Registry()
    calls: list[int] = []

    async def flaky_async(p: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TimeoutError("slow")
        return "fine"

    reg.register("test.af", flaky_async)
    wf = retry_workflow("test.af", NodeSettings(retry_on_failed=True, retry_delay_ms=0))

    async def main() -> Any:
        paused = await aexecute_workflow(wf, None, registry=reg)
        assert isinstance(paused, Suspend)
        assert paused.execution is not None
        return await aresume_workflow(paused.execution, None, workflow=wf, registry=reg)

    outcome = asyncio.run(main())
    assert isinstance(outcome, Completed)
    assert calls == [1, 2]


def test_async_attempt_timeout_is_cancelled() -> None:
    """An async attempt past its timeout is cancelled and fails with AttemptTimeout."""
    reg = Registry()
    cancelled: list[bool] = []

    async def hang(p: Any, ctx: ActionContext) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    reg.register("test.hang", hang)
    wf = retry_workflow("test.hang", NodeSettings(timeout=0.01))
    outcome = asyncio.run(aexecute_workflow(wf, None, registry=reg))
    assert isinstance(outcome, Failed)
    assert outcome.error.type == "AttemptTimeout"
    assert outcome.error.code == "timeout"
    assert cancelled == [True]


def test_sync_attempt_timeout_abandons_the_thread() -> None:
    """A sync attempt past its timeout fails with AttemptTimeout; its thread is left behind."""
    reg = Registry()
    release = threading.Event()
    reg.register("test.block", lambda p, ctx: release.wait(5))
    wf = retry_workflow(
        "test.block", NodeSettings(retry=RetryPolicy(max_attempts=2, initial_delay=0, timeout=0.01))
    )
    try:
        outcome = execute_workflow(wf, None, registry=reg)
        assert isinstance(outcome, Suspend)
        assert isinstance(outcome.data, RetryData)
        assert outcome.data.original_error.type == "AttemptTimeout"
    finally:
        release.set()


def test_cancel_closes_the_suspended_node(registry: Registry, clock: ManualClock) -> None:
    """cancel_execution marks the execution cancelled and closes the paused node's record."""
    wf = wait_workflow({"mode": "webhook"})
    paused = run(wf, None, registry, clock=clock)
    assert paused.execution is not None
    events: list[Event] = []
    cancelled = cancel_execution(
        paused.execution, "user gave up", clock=clock, observers=[events.append]
    )
    assert cancelled.status is ExecutionStatus.CANCELLED
    record = cancelled.node_executions["wait"][0]
    assert record.status is NodeStatus.CANCELLED
    assert record.attempts[-1].outcome is AttemptOutcome.CANCELLED
    assert cancelled.due_at is None
    assert [e.name for e in events] == ["execution_cancelled"]
    assert cancel_execution(cancelled) is cancelled
    with pytest.raises(ResumeError):
        resume_workflow(cancelled, {}, workflow=wf, registry=registry)
    done = run(if_workflow(True), {}, registry)
    with pytest.raises(ResumeError, match="completed"):
        cancel_execution(done.execution)


def test_expire_webhook_fails_the_wait_node(registry: Registry, clock: ManualClock) -> None:
    """An expired webhook wait fails its node with a non-retryable WebhookTimeout."""
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "webhook", "timeout_hours": 1},
                settings=NodeSettings(retry_on_failed=True),
            ),
        ],
        connections=chain("start", "wait"),
    )
    paused = run(wf, None, registry, clock=clock)
    assert paused.execution is not None
    clock.advance(3600)
    outcome = expire_webhook(paused.execution, workflow=wf, registry=registry, clock=clock)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == "webhook_timeout"
    assert outcome.error.type == "WebhookTimeout"
    record = outcome.execution.node_executions["wait"][0]
    assert record.status is NodeStatus.FAILED
    assert [a.number for a in record.attempts] == [1]


def test_expired_webhook_can_route_to_error_port(registry: Registry, clock: ManualClock) -> None:
    """With continue_error_output an expired wait completes on its error port."""
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(
                key="wait",
                type="wait.wait",
                params={"mode": "webhook"},
                settings=NodeSettings(on_error="continue_error_output"),
            ),
            Node(key="late", type="test.echo"),
        ],
        connections=[conn("start", "wait"), conn("wait", "late", from_port="error")],
    )
    paused = run(wf, None, registry, clock=clock)
    assert paused.execution is not None
    outcome = expire_webhook(paused.execution, workflow=wf, registry=registry, clock=clock)
    assert isinstance(outcome, Completed)
    assert outcome.output["input"]["main"]["code"] == "webhook_timeout"
    with pytest.raises(ResumeError, match="not waiting on a webhook"):
        expire_webhook(outcome.execution, workflow=wf, registry=registry)


def test_cancel_event_and_record(registry: Registry, clock: ManualClock) -> None:
    """Cancelling a retry wait closes the node as cancelled and emits one execution_cancelled."""
    wf = workflow(Node(key="x", type="test.down", settings=NodeSettings(retry=RetryPolicy())))
    paused = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    events: list[Event] = []
    clock.advance(1)
    cancelled = cancel_execution(
        paused.execution, "no longer needed", clock=clock, observers=[events.append]
    )
    assert [(e.name, e.node_key, e.at) for e in events] == [("execution_cancelled", "x", clock())]
    assert cancelled.status is ExecutionStatus.CANCELLED
    assert cancelled.error is not None
    assert cancelled.error.message == "no longer needed"
    record = cancelled.node_executions["x"][0]
    assert record.status is NodeStatus.CANCELLED
    assert record.completed_at == clock()
    assert [a.outcome for a in record.attempts] == [AttemptOutcome.FAILED]
    assert paused.execution.status is ExecutionStatus.SUSPENDED  # input untouched


async def ask(params: Any, ctx: ActionContext) -> Any:
    await asyncio.sleep(0)
    return Suspend("approval", {"who": params["who"]})


async def answer(params: Any, ctx: ActionContext, data: Any) -> Any:
    await asyncio.sleep(0)
    return {"approved": data["ok"], "who": params["who"], "attempt": ctx.attempt}


def approval_workflow() -> tuple[Workflow, Registry]:
    registry = Registry()
    registry.register("t.ask", ask, answer)
    return workflow(Node(key="x", type="t.ask", params={"who": "ann"})), registry


def test_async_resume_callback_matches_sync_and_reloaded_runs() -> None:
    """aexecute/aresume with async action and resume give what the sync API and a reload give."""
    wf, registry = approval_workflow()

    async def run_async() -> tuple[Outcome, Outcome]:
        clock = ManualClock(T0)
        paused = await aexecute_workflow(wf, None, registry=registry, clock=clock, execution_id="e")
        assert isinstance(paused, Suspend)
        assert paused.execution is not None
        clock.advance(1)
        done = await aresume_workflow(
            paused.execution, {"ok": True}, workflow=wf, registry=registry, clock=clock
        )
        reloaded = await aresume_workflow(
            loads(dumps(paused.execution)),
            {"ok": True},
            workflow=wf,
            registry=registry,
            clock=clock,
        )
        return done, reloaded

    done, reloaded = asyncio.run(run_async())
    clock = ManualClock(T0)
    paused = execute_workflow(wf, None, registry=registry, clock=clock, execution_id="e")
    assert paused.execution is not None
    clock.advance(1)
    sync_done = resume_workflow(
        paused.execution, {"ok": True}, workflow=wf, registry=registry, clock=clock
    )
    assert isinstance(done, Completed)
    assert done.output == {"approved": True, "who": "ann", "attempt": 1}
    assert done == reloaded == sync_done


def test_sync_api_with_async_action_inside_a_running_loop_is_not_retried(
    registry: Registry,
) -> None:
    """The misuse neither schedules a retry nor leaves a never-awaited coroutine behind."""

    async def act(params: Any, ctx: ActionContext) -> Any:
        return 1

    registry.register("t.async", act)
    wf = workflow(Node(key="x", type="t.async", settings=NodeSettings(retry=RetryPolicy())))

    async def misuse() -> Outcome | None:
        try:
            return execute_workflow(wf, None, registry=registry)
        except PranaError:
            return None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = asyncio.run(misuse())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert outcome is None or isinstance(outcome, Failed)


# -- validation ------------------------------------------------------------------------


def test_invalid_workflow_lists_every_problem(registry: Registry) -> None:
    """One InvalidWorkflowError names every problem: duplicates, unknown nodes, ports, types."""
    wf = Workflow(
        id="bad",
        nodes=[
            trigger("t1"),
            trigger("t2"),
            Node(key="a", type="test.double"),
            Node(key="a", type="test.double"),
            Node(key="ghost", type="no.such"),
            Node(key="iff", type="logic.if_condition", params={"condition": True}),
        ],
        connections=[conn("t1", "nowhere"), conn("iff", "a", from_port="maybe")],
    )
    with pytest.raises(InvalidWorkflowError) as info:
        run(wf, None, registry)
    problems = "\n".join(info.value.problems)
    assert "duplicate key" in problems
    assert "'nowhere'" in problems
    assert "unknown action type 'no.such'" in problems
    assert "'maybe'" in problems
    assert "2 trigger nodes" in problems
    assert len(info.value.problems) == 5
    assert isinstance(info.value, ValueError)


def test_template_syntax_error_is_found_before_running(registry: Registry) -> None:
    """A template that cannot compile makes the workflow invalid, naming the node and param."""
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="x", type="test.echo", params={"url": "{{ $input.main + }}"})],
        connections=chain("start", "x"),
    )
    with pytest.raises(InvalidWorkflowError, match=r"node 'x': url: template syntax error"):
        run(wf, None, registry)


def test_no_trigger_is_invalid(registry: Registry) -> None:
    """A workflow without a trigger node is refused with a fix."""
    wf = Workflow(id="w", nodes=[Node(key="a", type="test.double")], connections=[])
    with pytest.raises(InvalidWorkflowError, match="no trigger"):
        run(wf, None, registry)


def test_non_json_input_is_refused(registry: Registry) -> None:
    """Workflow input must be JSON-native so a reloaded execution resumes the same way."""
    wf = Workflow(id="w", nodes=[trigger()], connections=[])
    with pytest.raises(InvalidWorkflowError, match="JSON-native"):
        run(wf, {"when": T0}, registry)


def test_trigger_only_workflow_outputs_its_input(registry: Registry) -> None:
    """A lone trigger completes with the workflow input."""
    wf = Workflow(id="w", nodes=[trigger()], connections=[])
    outcome = run(wf, {"a": 1}, registry)
    assert isinstance(outcome, Completed)
    assert outcome.output == {"a": 1}


def test_workflow_level_outcome_types_are_exclusive(registry: Registry) -> None:
    """Every call returns exactly one outcome type carrying the execution."""
    wf = Workflow(id="w", nodes=[trigger()], connections=[])
    outcome = run(wf, None, registry)
    assert isinstance(outcome.execution, WorkflowExecution)
    assert sum(isinstance(outcome, t) for t in (Completed, Suspend, Failed)) == 1


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Node(key="a", type="x", params=[1]), "Node.params"),  # type: ignore[arg-type]
        (lambda: Node(key="", type="x"), "Node.key"),
        (lambda: Node(key="a", type="x", settings={"max_retries": 2}), "Node.settings"),  # type: ignore[arg-type]
        (lambda: Workflow(id="w", nodes=[], connections=[], variables=3), "Workflow.variables"),  # type: ignore[arg-type]
        (lambda: Workflow(id="w", nodes=[], connections=[], version=0), "Workflow.version"),
        (lambda: NodeSettings(retry_delay_ms=60_001), "NodeSettings.retry_delay_ms"),
        (lambda: NodeSettings(on_error="explode"), "NodeSettings.on_error"),  # type: ignore[arg-type]
        (lambda: Connection(from_node="a", to_node=""), "Connection.to_node"),
    ],
)
def test_bad_definitions_fail_at_construction_naming_the_field(
    build: Callable[[], object], field: str
) -> None:
    """Bad definition values raise a ValueError naming the field, before anything runs."""
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        build()


def test_env_as_a_mapping_proxy_is_accepted() -> None:
    """A read-only MappingProxyType env passes the entry checks and reaches templates."""
    from types import MappingProxyType

    registry = Registry()
    registry.register("test.inputs", lambda params, ctx: params)
    wf = Workflow(
        id="env",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="e", type="test.inputs", params={"v": "{{ $env.K }}"}),
        ],
        connections=[Connection(from_node="start", to_node="e")],
    )
    outcome = execute_workflow(
        wf, None, registry=registry, clock=ManualClock(T0), env=MappingProxyType({"K": "x"})
    )
    assert isinstance(outcome, Completed)
    assert outcome.output == {"v": "x"}


# -- values the record cannot hold -----------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{{ 2 ** 64 }}", "65 bits"),
        ("{{ -(2 ** 63) - 1 }}", "64 bits"),
        ("{{ '\\ud800' }}", "lone surrogate"),
    ],
)
def test_params_the_record_cannot_hold_fail_before_the_action_runs(
    template: str, problem: str
) -> None:
    """A rendered param the serializer cannot write is a template_error naming the param,
    before the action runs; it used to run the action and then fail to save."""
    calls: list[Any] = []

    def charge(params: Any, ctx: ActionContext) -> str:
        calls.append(params)
        return "ok"

    registry = Registry()
    registry.register("test.charge", charge)
    outcome = execute_workflow(
        workflow(Node(key="charge", type="test.charge", params={"amount": template})),
        registry=registry,
    )
    assert isinstance(outcome, Failed)
    assert calls == []
    assert outcome.error.code == ErrorCode.TEMPLATE_ERROR.value
    assert outcome.error.message.startswith("params.amount: ")
    assert problem in outcome.error.message
    assert loads(dumps(outcome.execution)).status is ExecutionStatus.FAILED


@pytest.mark.parametrize("value", [2**64, "\udfff", ["\ud800"]], ids=["int", "str", "nested"])
def test_an_output_the_record_cannot_hold_fails_the_node_and_the_record_saves(
    value: Any,
) -> None:
    """Top-level str and int outputs skipped the check; now they fail the node loudly."""
    registry = Registry()
    registry.register("test.give", lambda params, ctx: value)
    outcome = execute_workflow(workflow(Node(key="give", type="test.give")), registry=registry)
    assert isinstance(outcome, Failed)
    assert outcome.error.code == ErrorCode.OUTPUT_NOT_JSON.value
    assert loads(dumps(outcome.execution)).status is ExecutionStatus.FAILED


def test_error_details_are_always_a_json_object() -> None:
    """An exception's ``details`` that is not a dict is kept under ``"details"``."""

    class OddError(Exception):
        details: ClassVar[object] = ["a", 1]

    class OpaqueError(Exception):
        details: ClassVar[object] = {1: object()}

    registry = Registry()
    for key, exc in (("odd", OddError("x")), ("opaque", OpaqueError("y"))):
        registry.register(f"test.{key}", raising(exc))
    found = {}
    for key in ("odd", "opaque"):
        wf = Workflow(
            id="w",
            nodes=[Node(key="t", type="manual.trigger"), Node(key="n", type=f"test.{key}")],
            connections=[Connection(from_node="t", to_node="n")],
        )
        outcome = execute_workflow(wf, None, registry=registry)
        assert isinstance(outcome, Failed)
        found[key] = outcome.error.details
    assert found["odd"] == {"details": ["a", 1]}
    opaque = found["opaque"]
    assert opaque is not None
    assert isinstance(opaque["details"], str)
    assert opaque["details"].startswith("{1: <object object")


def test_an_unknown_action_type_suggests_the_closest_and_mentions_actions() -> None:
    """A mistyped type names the closest registered/built-in types and ``--actions``."""
    registry = Registry()
    registry.register("billing.charge", lambda params, ctx: None)
    for typo, expected in (
        ("http.reqest", "'http.request'"),
        ("billing.charg", "'billing.charge'"),
    ):
        wf = Workflow(
            id="w",
            nodes=[Node(key="t", type="manual.trigger"), Node(key="n", type=typo)],
            connections=[Connection(from_node="t", to_node="n")],
        )
        with pytest.raises(InvalidWorkflowError) as info:
            execute_workflow(wf, None, registry=registry)
        message = str(info.value)
        assert f"unknown action type {typo!r} (did you mean {expected}" in message
        assert "--actions MODULE" in message
    far = Workflow(id="w", nodes=[Node(key="n", type="zzz.qqq")], connections=[])
    with pytest.raises(InvalidWorkflowError) as info:
        execute_workflow(far, None, registry=registry)
    assert "did you mean" not in str(info.value)
