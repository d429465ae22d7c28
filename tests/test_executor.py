"""The executor, driven step by step: each test checks the state after each step."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from prana import (
    ActionContext,
    AttemptOutcome,
    Completed,
    Connection,
    Event,
    ExecutionStatus,
    Failed,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    NodeStatus,
    NonRetryable,
    Output,
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
    execute_workflow,
    expire_webhook,
    resume_workflow,
)
from prana.testing import ManualClock

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def trigger(key: str = "start") -> Node:
    return Node(key=key, type="manual.trigger")


def conn(a: str, b: str, from_port: str = "main", to_port: str = "main") -> Connection:
    return Connection(from_node=a, to_node=b, from_port=from_port, to_port=to_port)


def chain(*keys: str) -> list[Connection]:
    return [conn(a, b) for a, b in itertools.pairwise(keys)]


def flaky(fails: int, exc: Callable[[], Exception] = lambda: ConnectionError("down")) -> Any:
    """An action that fails ``fails`` times, then returns the attempt number it succeeded on."""
    calls: list[int] = []

    def action(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if len(calls) <= fails:
            raise exc()
        return {"ok": True, "attempt": ctx.attempt}

    action.calls = calls  # type: ignore[attr-defined]
    return action


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.register("test.double", lambda p, ctx: ctx.input["main"] * 2)
    reg.register("test.add", lambda p, ctx: ctx.input["main"] + p.get("n", 1))
    reg.register("test.echo", lambda p, ctx: {"params": dict(p), "input": dict(ctx.input)})
    return reg


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
                params={"state": {"counter": "{{ ($execution.state.counter or 0) + 1 }}"}},
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
    action = flaky(2)
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
    assert action.calls == [1, 2, 3]
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
    registry.register("test.flaky", flaky(10))
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


def test_zero_delay_retry_still_suspends(registry: Registry) -> None:
    """A 0 ms retry is still a suspension: the core never loops on its own."""
    registry.register("test.flaky", flaky(1))
    wf = retry_workflow("test.flaky", NodeSettings(retry_on_failed=True, retry_delay_ms=0))
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 0


def test_retry_then_error_port(registry: Registry) -> None:
    """continue_error_output routes the error-shaped output to the error port after retries."""
    registry.register("test.flaky", flaky(10))
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
    registry.register("test.flaky", flaky(1))
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
    registry.register("test.limited", flaky(1, lambda: RetryAfter(7)))
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
    registry.register("test.flaky", flaky(1), retry=RetryPolicy(max_attempts=2, initial_delay=0.25))
    wf = Workflow(
        id="w",
        nodes=[trigger(), Node(key="call", type="test.flaky")],
        connections=chain("start", "call"),
    )
    outcome = run(wf, None, registry)
    assert isinstance(outcome, Suspend)
    assert outcome.data.retry_delay_ms == 250


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
    registry.register("test.flaky", flaky(1))
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
