"""Review of the pure core against DESIGN.md sections 2-5.

Some tests pin the bugs that review found (each fixed since; the test keeps it fixed), the
others pin promises that had no test of their own.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import pytest

from prana import (
    ActionContext,
    AttemptOutcome,
    Completed,
    Connection,
    Event,
    ExecutionStatus,
    Failed,
    Node,
    NodeSettings,
    NodeStatus,
    NonRetryable,
    Outcome,
    PranaError,
    Registry,
    RetryAfter,
    RetryData,
    RetryPolicy,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    aexecute_workflow,
    aresume_workflow,
    cancel_execution,
    dumps,
    dumps_workflow,
    execute_workflow,
    loads,
    loads_workflow,
    resume_workflow,
)
from prana.testing import ManualClock

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
PLUS2 = timezone(timedelta(hours=2))


# -- helpers -----------------------------------------------------------------------------


def trigger() -> Node:
    return Node(key="start", type="manual.trigger")


def conn(a: str, b: str, from_port: str = "main", to_port: str = "main") -> Connection:
    return Connection(from_node=a, to_node=b, from_port=from_port, to_port=to_port)


def if_node(key: str, condition: Any) -> Node:
    return Node(key=key, type="logic.if_condition", params={"condition": condition})


def value_node(key: str, value: Any) -> Node:
    return Node(key=key, type="data.set_data", params={"value": value})


def single(node: Node, **workflow: Any) -> Workflow:
    """A workflow of the trigger and ``node``."""
    return Workflow(
        id="w", nodes=[trigger(), node], connections=[conn("start", node.key)], **workflow
    )


def raising(exc: BaseException) -> Any:
    def action(params: Any, ctx: ActionContext) -> Any:
        raise exc

    return action


def echo(params: Any, ctx: ActionContext) -> Any:
    return dict(ctx.input)


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
    while isinstance(outcome, Suspend) and outcome.kind == "retry":
        assert outcome.execution is not None
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


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.register("t.echo", echo)
    reg.register("t.down", raising(ConnectionError("down")))
    return reg


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


# -- order and joins ---------------------------------------------------------------------


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
    outcome = execute_workflow(counting_loop("t.echo"), None, registry=registry)
    assert isinstance(outcome, Completed)
    runs = outcome.execution.node_executions["j"]
    assert sorted(r.output["main"] for r in runs) == [0, 1]


def test_or_join_queued_while_pending_runs_after_the_loop_by_key_order(
    registry: Registry,
) -> None:
    """Depth-first with ties by key: the loop (chk < j) runs to its end before j runs twice."""
    registry.register("t.count", count)
    outcome = execute_workflow(counting_loop("t.echo"), None, registry=registry)
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
            Node(key="m", type="t.echo"),
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
                params={"state": {"n": "{{ ($execution.state.n or 0) + 1 }}"}},
            ),
            Node(key="m", type="t.echo"),
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


# -- retry semantics ---------------------------------------------------------------------


def test_simple_form_gives_n_plus_one_attempts_constant_delay_and_retries_value_error(
    registry: Registry, clock: ManualClock
) -> None:
    """NodeSettings(retry_on_failed, max_retries=3) retries even ValueError, 4 attempts, 0.5s."""
    registry.register("t.bad", raising(ValueError("bad value")))
    settings = NodeSettings(retry_on_failed=True, max_retries=3, retry_delay_ms=500)
    wf = single(Node(key="x", type="t.bad", settings=settings))
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
        "t.down",
        raising(ConnectionError("down")),
        retry=policy(levels["action"]) if "action" in levels else None,
    )
    defaults = {}
    if "star" in levels:
        defaults["*"] = policy(levels["star"])
    if "type" in levels:
        defaults["t.down"] = policy(levels["type"])
    if "node" in levels:
        settings = NodeSettings(retry=policy(levels["node"]))
    elif levels.get("simple"):
        settings = NodeSettings(retry_on_failed=True, max_retries=5, retry_delay_ms=0)
    else:
        settings = NodeSettings()
    wf = single(Node(key="x", type="t.down", settings=settings), retry_defaults=defaults)
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    if expected is None:
        assert isinstance(outcome, Failed)
    else:
        assert isinstance(outcome, Suspend)
        assert outcome.kind == "retry"
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
    wf = single(Node(key="x", type="t.rec", params=params, settings=settings))
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
    wf = single(Node(key="x", type="t.down", settings=NodeSettings(retry=policy)))
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
    wf = single(Node(key="x", type="t.down", settings=NodeSettings(retry=policy)))
    outcome = execute_workflow(wf, None, registry=registry, clock=TickingClock())
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    start = outcome.execution.node_executions["x"][0].started_at
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
    wf = single(Node(key="x", type="t.hint", settings=NodeSettings(retry=policy)))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    if delay_ms is None:  # a retry_on filter that does not name RetryAfter: no retry
        assert isinstance(outcome, Failed)
    else:
        assert isinstance(outcome, Suspend)
        assert outcome.data.retry_delay_ms == delay_ms
        assert outcome.data.resume_at == T0 + timedelta(milliseconds=delay_ms)


def test_retry_on_result_polls_until_the_output_is_accepted(
    registry: Registry, clock: ManualClock
) -> None:
    """A rejected output is a failed attempt that retries; the accepted one completes the node."""
    registry.register("t.poll", lambda params, ctx: {"ready": ctx.attempt >= 3})
    policy = RetryPolicy(max_attempts=5, retry_on_result="{{ not $output.ready }}")
    wf = single(Node(key="x", type="t.poll", settings=NodeSettings(retry=policy)))
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


# -- on_error ----------------------------------------------------------------------------


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
            Node(key="x", type="t.down", settings=NodeSettings(on_error=mode)),
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


# -- events ------------------------------------------------------------------------------


def names(events: list[Event]) -> list[tuple[str, str | None, int | None]]:
    return [(e.name, e.node_key, e.attempt) for e in events]


def test_events_through_suspend_and_resume(registry: Registry, clock: ManualClock) -> None:
    """A webhook pause emits node/execution suspended, then execution/node resumed on resume."""
    events: list[Event] = []
    wf = single(Node(key="w", type="wait.wait", params={"mode": "webhook"}))
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
    wf = single(Node(key="x", type="t.down", settings=NodeSettings(retry=policy)))
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
    wf = single(Node(key="x", type="t.fatal", settings=NodeSettings(retry=policy)))
    outcome, _ = run_retries(wf, registry, clock, observers=[events.append])
    assert isinstance(outcome, Failed)
    assert calls == [1, 2]
    assert "node_retry_exhausted" not in [e.name for e in events]


def test_cancel_event_and_record(registry: Registry, clock: ManualClock) -> None:
    """Cancelling a retry wait closes the node as cancelled and emits one execution_cancelled."""
    wf = single(Node(key="x", type="t.down", settings=NodeSettings(retry=RetryPolicy())))
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


# -- serialization -----------------------------------------------------------------------


def suspending(value: Any) -> Any:
    def action(params: Any, ctx: ActionContext) -> Any:
        return value

    return action


@pytest.mark.parametrize(
    "suspension",
    [
        Suspend("timer", TimerData(resume_at=datetime(2030, 1, 2, tzinfo=PLUS2))),
        Suspend("webhook", WebhookData(expires_at=None)),
        Suspend("webhook", WebhookData(expires_at=datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=PLUS2))),
        Suspend(
            "sub_workflow",
            SubWorkflowData(
                workflow_id="child",
                input={"q": [1, None, {"r": 1.5}]},
                mode="async",
                version=2,
                timeout_ms=5000,
                child_execution_id="c1",
                expires_at=datetime(2030, 1, 1, 0, 0, 5, tzinfo=PLUS2),
            ),
        ),
        Suspend("approval", {"who": ["ann", {"b": None}], "n": 1.5, "ok": True}),
        Suspend("approval", None),
        Suspend("custom.kind", [1, "two", [3]]),
    ],
    ids=[
        "timer",
        "webhook-never",
        "webhook",
        "sub_workflow",
        "custom",
        "custom-none",
        "custom-list",
    ],
)
def test_every_suspension_kind_round_trips_and_resumes_identically(
    suspension: Suspend,
) -> None:
    """loads(dumps(x)) == x for each kind, and the reloaded execution resumes the same way."""
    registry = Registry()
    registry.register(
        "t.pause", suspending(suspension), lambda params, ctx, data: {"resumed": data}
    )
    wf = single(Node(key="p", type="t.pause"))
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=PLUS2))
    paused = execute_workflow(wf, {"in": 1}, registry=registry, clock=clock, execution_id="e1")
    assert isinstance(paused, Suspend)
    execution = paused.execution
    assert execution is not None
    reloaded = loads(dumps(execution))
    assert reloaded == execution
    assert reloaded.suspension == Suspend(suspension.kind, suspension.data)
    assert reloaded.due_at == execution.due_at
    data: Any = (
        {"status": "completed", "output": [1]} if suspension.kind == "sub_workflow" else {"d": 1}
    )
    clock.advance(1)
    a = resume_workflow(execution, data, workflow=wf, registry=registry, clock=clock)
    b = resume_workflow(reloaded, data, workflow=wf, registry=registry, clock=clock)
    assert a == b
    assert isinstance(a, Completed)


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


def test_failed_and_cancelled_executions_round_trip(registry: Registry, clock: ManualClock) -> None:
    """Final executions (failed with an error, cancelled mid-retry) reload equal."""
    failed = execute_workflow(
        single(Node(key="x", type="t.down")), None, registry=registry, clock=clock
    )
    assert isinstance(failed, Failed)
    assert loads(dumps(failed.execution)) == failed.execution
    wf = single(Node(key="x", type="t.down", settings=NodeSettings(retry=RetryPolicy())))
    paused = execute_workflow(wf, None, registry=registry, clock=clock)
    assert paused.execution is not None
    cancelled = cancel_execution(paused.execution, "stop", clock=clock)
    assert loads(dumps(cancelled)) == cancelled


def test_tuple_in_an_output_does_not_break_the_round_trip(
    registry: Registry, clock: ManualClock
) -> None:
    """An output that is accepted reloads equal (or a non-JSON output fails the node)."""
    registry.register("t.tuple", lambda params, ctx: {"pair": (1, 2)})
    wf = Workflow(
        id="w",
        nodes=[
            trigger(),
            Node(key="x", type="t.tuple"),
            Node(key="w", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[conn("start", "x"), conn("x", "w")],
    )
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


class DetailedError(Exception):
    def __init__(self) -> None:
        super().__init__("with details")
        self.details = {"pair": (1, 2)}


def test_error_details_with_a_tuple_round_trip(registry: Registry, clock: ManualClock) -> None:
    """A retry suspension whose error carries details reloads equal."""
    registry.register("t.detailed", raising(DetailedError()))
    wf = single(Node(key="x", type="t.detailed", settings=NodeSettings(retry=RetryPolicy())))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


SETTINGS_FORMS = [
    NodeSettings(),
    NodeSettings(retry_on_failed=True, max_retries=10, retry_delay_ms=0, on_error="continue"),
    NodeSettings(
        retry="[(ConnectionError, TimeoutError) -> retry: 3, backoff: 2s] [retry: 1] [timeout: 5s]",
        on_error="continue_error_output",
    ),
    NodeSettings(
        retry=[
            RetryPolicy(
                retry_on=(ConnectionError,),
                exclude=("ConnectionResetError",),
                jitter=0.25,
                backoff="fibonacci",
            ),
            RetryPolicy(enabled=False),
        ]
    ),
    NodeSettings(
        retry=RetryPolicy(
            max_attempts=None,
            retry_timeout=timedelta(minutes=5),
            retry_on_result="{{ $output.status == 'pending' }}",
            retry_when="{{ $attempt < 4 }}",
            timeout="500ms",
            hint_exceeds_max_delay=True,
            seed="s",
            initial_delay="250ms",
            max_delay="2m",
            multiplier=3,
            backoff="linear",
            jitter="decorrelated",
        )
    ),
    NodeSettings(retry=3, timeout=timedelta(seconds=2)),
    NodeSettings(retry=True),
    NodeSettings(retry=False),
    NodeSettings(retry={"max_retries": 2, "delay": "1s"}),
]


@pytest.mark.parametrize("settings", SETTINGS_FORMS)
def test_workflow_with_every_settings_form_round_trips(settings: NodeSettings) -> None:
    """loads_workflow(dumps_workflow(wf)) == wf for each way of writing node settings."""
    wf = Workflow(
        id="w",
        name="every form",
        version=2,
        variables={"v": [1, {"a": None}]},
        nodes=[trigger(), Node(key="x", type="t.echo", settings=settings, name="X")],
        connections=[conn("start", "x")],
        retry_defaults={"*": RetryPolicy(enabled=False), "http.request": "[retry: 2]", "t.echo": 2},
        max_iterations=7,
    )
    assert loads_workflow(dumps_workflow(wf)) == wf


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(retry_on=("builtins:ConnectionError",)),
        RetryPolicy(stop_when="json:loads"),
        RetryPolicy(retry_on_result="json:loads"),
    ],
    ids=["retry_on", "stop_when", "retry_on_result"],
)
def test_reference_strings_round_trip(policy: RetryPolicy) -> None:
    """A policy written with 'module:qualname' text reloads equal to itself."""
    wf = single(Node(key="x", type="t.echo", settings=NodeSettings(retry=policy)))
    assert loads_workflow(dumps_workflow(wf)) == wf


# -- templates ---------------------------------------------------------------------------


def test_templates_see_latest_loop_run_workflow_and_run_index(
    registry: Registry, clock: ManualClock
) -> None:
    """After a loop $nodes.x is the latest run; $workflow and $execution.run_index render."""
    wf = Workflow(
        id="t",
        name="named",
        version=3,
        nodes=[
            trigger(),
            Node(
                key="inc",
                type="workflow.set_state",
                params={"state": {"n": "{{ ($execution.state.n or 0) + 1 }}"}},
            ),
            value_node("val", "{{ $execution.state.n * 10 }}"),
            if_node("chk", "{{ $execution.state.n < 3 }}"),
            value_node(
                "out",
                {
                    "last": "{{ $nodes.val.output }}",
                    "run": "{{ $nodes.val.run_index }}",
                    "wf": "{{ $workflow }}",
                    "own_run": "{{ $execution.run_index }}",
                    "text": "at {{ $now }}",
                },
            ),
        ],
        connections=[
            conn("start", "inc"),
            conn("inc", "val"),
            conn("val", "chk"),
            conn("chk", "inc", "true"),
            conn("chk", "out", "false"),
        ],
    )
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Completed)
    assert outcome.output == {
        "last": 30,
        "run": 2,
        "wf": {"id": "t", "name": "named", "version": 3},
        "own_run": 0,
        "text": f"at {T0.isoformat()}",
    }


def test_now_as_a_value_is_json_native(registry: Registry, clock: ManualClock) -> None:
    """A node can store the current time with value '{{ $now }}'."""
    wf = single(value_node("stamp", {"at": "{{ $now }}"}))
    outcome = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(outcome, Completed)
    assert outcome.output == {"at": T0.isoformat()}


# -- async -------------------------------------------------------------------------------


async def ask(params: Any, ctx: ActionContext) -> Any:
    await asyncio.sleep(0)
    return Suspend("approval", {"who": params["who"]})


async def answer(params: Any, ctx: ActionContext, data: Any) -> Any:
    await asyncio.sleep(0)
    return {"approved": data["ok"], "who": params["who"], "attempt": ctx.attempt}


def approval_workflow() -> tuple[Workflow, Registry]:
    registry = Registry()
    registry.register("t.ask", ask, answer)
    return single(Node(key="x", type="t.ask", params={"who": "ann"})), registry


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
    wf = single(Node(key="x", type="t.async", settings=NodeSettings(retry=RetryPolicy())))

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
