"""The state tables (executions, node runs, attempts): every edge walked, every other refused."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from doubles import T0, Flaky, webhook_node, workflow

from prana import (
    AttemptOutcome,
    Completed,
    Event,
    EventType,
    ExecutionStatus,
    Node,
    NodeExecution,
    NodeSettings,
    NodeStatus,
    Registry,
    ResumeError,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    execute_workflow,
    redrive_execution,
    resume_workflow,
)
from prana._state import (
    ATTEMPT_TRANSITIONS,
    FINAL,
    NODE_REDRIVE,
    NODE_TRANSITIONS,
    REDRIVE,
    TRANSITIONS,
    check_attempt_transition,
    check_node_transition,
    check_transition,
    transition_diagram,
)
from prana.shell import recover_execution
from prana.testing import ManualClock

EDGES = [(src, dst) for src, targets in TRANSITIONS.items() for dst in targets]
NON_EDGES = [
    (src, dst)
    for src, dst in itertools.product(ExecutionStatus, repeat=2)
    if dst not in TRANSITIONS[src]
]


@pytest.mark.parametrize(("src", "dst"), EDGES, ids=lambda s: s.value)
def test_every_edge_is_allowed(src: ExecutionStatus, dst: ExecutionStatus) -> None:
    """Each transition in the table passes the check."""
    check_transition(src, dst)


@pytest.mark.parametrize(("src", "dst"), NON_EDGES, ids=lambda s: s.value)
def test_every_other_pair_is_refused(src: ExecutionStatus, dst: ExecutionStatus) -> None:
    """A transition missing from the table raises ResumeError naming both states."""
    with pytest.raises(ResumeError, match=f"{src.value} cannot become {dst.value}"):
        check_transition(src, dst)


def test_table_covers_every_status_and_finals_are_final() -> None:
    """Every status has a row; from completed, failed and cancelled only a redrive leads on."""
    assert set(TRANSITIONS) == set(ExecutionStatus)
    assert {s.value for s in FINAL} == {"completed", "failed", "cancelled"}
    assert {(a.value, b.value) for a, b in REDRIVE} == {("failed", "suspended")}
    assert all(dst in TRANSITIONS[src] for src, dst in REDRIVE)
    assert all((src, dst) in REDRIVE for src in FINAL for dst in TRANSITIONS[src])
    assert len(EDGES) + len(NON_EDGES) == len(ExecutionStatus) ** 2


def test_diagram_is_generated_from_the_table() -> None:
    """The Mermaid diagram has one arrow per edge."""
    diagram = transition_diagram()
    for src, dst in EDGES:
        assert f"{src.value} --> {dst.value}" in diagram
    assert diagram.count("-->") == len(EDGES) + 1 + len(FINAL)


# -- node runs and attempts ------------------------------------------------------------------

NODE_EDGES = [(src, dst) for src, targets in NODE_TRANSITIONS.items() for dst in targets]
ATTEMPT_EDGES = [(src, dst) for src, targets in ATTEMPT_TRANSITIONS.items() for dst in targets]
NODE_NON_EDGES = [
    (src, dst)
    for src, dst in itertools.product(NodeStatus, repeat=2)
    if (src, dst) not in NODE_EDGES
]
ATTEMPT_NON_EDGES = [
    (src, dst)
    for src, dst in itertools.product(AttemptOutcome, repeat=2)
    if (src, dst) not in ATTEMPT_EDGES
]


def test_node_and_attempt_tables_cover_every_status() -> None:
    """Every status has a row, runs and attempts start running, and the ends are final."""
    assert set(NODE_TRANSITIONS) == set(NodeStatus)
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptOutcome)
    assert next(iter(NODE_TRANSITIONS)) is NodeStatus.RUNNING
    assert next(iter(ATTEMPT_TRANSITIONS)) is AttemptOutcome.RUNNING
    assert {(a.value, b.value) for a, b in NODE_REDRIVE} == {("failed", "suspended")}
    assert {
        s.value for s, t in NODE_TRANSITIONS.items() if all((s, n) in NODE_REDRIVE for n in t)
    } == {"completed", "failed", "cancelled"}
    assert {s.value for s, t in ATTEMPT_TRANSITIONS.items() if not t} == {
        "completed",
        "failed",
        "cancelled",
        "interrupted",
    }


@pytest.mark.parametrize(("src", "dst"), NODE_NON_EDGES, ids=lambda s: s.value)
def test_every_other_node_change_is_refused(src: NodeStatus, dst: NodeStatus) -> None:
    """A node-run change missing from the table raises ResumeError naming the node."""
    with pytest.raises(ResumeError, match=f"node 'n': a run that is {src.value} cannot become"):
        check_node_transition("n", src, dst)


@pytest.mark.parametrize(("src", "dst"), ATTEMPT_NON_EDGES, ids=lambda s: s.value)
def test_every_other_attempt_change_is_refused(src: AttemptOutcome, dst: AttemptOutcome) -> None:
    """An attempt change missing from the table raises ResumeError naming node and attempt."""
    with pytest.raises(ResumeError, match=f"node 'n': attempt 2, which is {src.value}, cannot"):
        check_attempt_transition("n", 2, src, dst)


def test_diagrams_are_generated_from_each_table() -> None:
    """Each table renders as a Mermaid diagram: one arrow per edge, from its start state."""
    for table, edges in ((NODE_TRANSITIONS, NODE_EDGES), (ATTEMPT_TRANSITIONS, ATTEMPT_EDGES)):
        diagram = transition_diagram(table)
        assert "[*] --> running" in diagram
        for src, dst in edges:
            assert f"{src.value} --> {dst.value}" in diagram
        finals = sum(1 for s, t in table.items() if all((s, n) in NODE_REDRIVE for n in t))
        assert diagram.count("-->") == len(edges) + 1 + finals


# Each edge walked through the executor: a scenario that makes it happen, and what it shows.


def _node(execution: WorkflowExecution, key: str) -> NodeExecution:
    record = execution.node(key)
    assert record is not None
    return record


def _registry() -> Registry:
    registry = Registry()
    registry.register("test.ok", lambda p, ctx: ctx.attempt)
    registry.register("test.down", Flaky(1))
    return registry


def _run(*nodes: Node, **settings: Any) -> tuple[Any, Workflow, Registry, list[Event]]:
    events: list[Event] = []
    registry = _registry()
    wf = workflow(*nodes)
    outcome = execute_workflow(
        wf, None, registry=registry, clock=ManualClock(T0), observers=[events.append], **settings
    )
    return outcome, wf, registry, events


def _started_then_settled(events: list[Event], outcome: Any, key: str, status: NodeStatus) -> None:
    """The engine started ``key`` (running) and its record settled as ``status``."""
    assert (EventType.NODE_STARTED, key) in [(e.type, e.node_key) for e in events]
    assert _node(outcome.execution, key).status is status


def _paused() -> tuple[Any, Workflow, Registry]:
    outcome, wf, registry, _ = _run(webhook_node())
    assert isinstance(outcome, Suspend)
    return outcome, wf, registry


def _walk_node_running_completed() -> None:
    outcome, *_, events = _run(Node(key="a", type="test.ok"))
    _started_then_settled(events, outcome, "a", NodeStatus.COMPLETED)


def _walk_node_running_failed() -> None:
    outcome, *_, events = _run(Node(key="a", type="test.down"))
    _started_then_settled(events, outcome, "a", NodeStatus.FAILED)


def _walk_node_running_suspended() -> None:
    outcome, *_, events = _run(webhook_node())
    _started_then_settled(events, outcome, "w", NodeStatus.SUSPENDED)


def _walk_node_suspended_running() -> None:
    retry = NodeSettings(retry=RetryPolicy(initial_delay=0))
    outcome, wf, registry, _ = _run(Node(key="a", type="test.down", settings=retry))
    before = _node(outcome.execution, "a")
    assert before.status is NodeStatus.SUSPENDED
    events: list[Event] = []
    resumed = resume_workflow(
        outcome.execution, workflow=wf, registry=registry, clock=ManualClock(T0),
        observers=[events.append],
    )  # fmt: skip
    assert isinstance(resumed, Completed)
    after = _node(resumed.execution, "a")
    started = [
        (e.node_key, e.run_index, e.attempt) for e in events if e.type is EventType.NODE_STARTED
    ]
    assert started[0] == ("a", before.run_index, 2)  # the same run, running its next attempt
    assert (after.execution_index, after.status) == (before.execution_index, NodeStatus.COMPLETED)


def _walk_node_failed_suspended() -> None:
    outcome, wf, registry, _ = _run(Node(key="a", type="test.down"))
    assert _node(outcome.execution, "a").status is NodeStatus.FAILED
    redriven = redrive_execution(outcome.execution, workflow=wf, registry=registry)
    assert _node(redriven, "a").status is NodeStatus.SUSPENDED  # the operator's edge


def _walk_node_suspended_cancelled() -> None:
    outcome, *_ = _paused()
    assert _node(cancel_execution(outcome.execution), "w").status is NodeStatus.CANCELLED


def _attempts(outcome: Any, key: str) -> list[tuple[int, AttemptOutcome]]:
    return [(a.number, a.outcome) for a in _node(outcome.execution, key).attempts]


def _walk_attempt_running_completed() -> None:
    outcome, *_ = _run(Node(key="a", type="test.ok"))
    assert _attempts(outcome, "a") == [(1, AttemptOutcome.COMPLETED)]


def _walk_attempt_running_failed() -> None:
    retry = NodeSettings(retry=RetryPolicy(initial_delay=0))
    outcome, *_ = _run(Node(key="a", type="test.down", settings=retry))
    assert _attempts(outcome, "a") == [(1, AttemptOutcome.FAILED)]


def _walk_attempt_running_suspended() -> None:
    outcome, *_ = _paused()
    assert _attempts(outcome, "w") == [(1, AttemptOutcome.SUSPENDED)]


def _walk_attempt_running_cancelled() -> None:
    outcome, *_ = _paused()
    record = _node(outcome.execution, "w")
    in_flight = attrs.evolve(record.attempts[-1], ended_at=None, outcome=AttemptOutcome.RUNNING)
    stored = _with_record(outcome.execution, "w", attempts=(in_flight,))
    assert _attempts(attrs.evolve(outcome, execution=cancel_execution(stored)), "w") == [
        (1, AttemptOutcome.CANCELLED)
    ]


def _walk_attempt_suspended_running() -> None:
    outcome, wf, registry = _paused()
    resumed = resume_workflow(
        outcome.execution, {"ok": True}, workflow=wf, registry=registry, clock=ManualClock(T0)
    )
    assert _attempts(resumed, "w") == [(1, AttemptOutcome.COMPLETED)]  # the same attempt, run on


class _Died(Exception):  # noqa: N818 - reads as what happened
    """Stands for the process dying inside the action: raised by the checkpoint, after it."""


def _checkpointed() -> tuple[WorkflowExecution, Workflow, Registry]:
    """The checkpoint a process saved before calling node ``a``'s action, then died in it."""
    registry = _registry()
    wf = workflow(Node(key="a", type="test.ok"))
    saved: list[WorkflowExecution] = []

    def checkpoint(execution: WorkflowExecution) -> None:
        saved.append(execution)
        if execution.node("a") is not None:
            raise _Died

    with pytest.raises(_Died):
        execute_workflow(wf, None, registry=registry, clock=ManualClock(T0), checkpoint=checkpoint)
    assert saved[-1].status is ExecutionStatus.RUNNING
    return saved[-1], wf, registry


def _walk_node_running_cancelled() -> None:
    stored, *_ = _checkpointed()
    assert _node(stored, "a").status is NodeStatus.RUNNING
    cancelled = cancel_execution(stored)
    assert cancelled.status is ExecutionStatus.CANCELLED
    assert _node(cancelled, "a").status is NodeStatus.CANCELLED


def _walk_attempt_running_interrupted() -> None:
    stored, wf, registry = _checkpointed()
    assert [a.outcome for a in _node(stored, "a").attempts] == [AttemptOutcome.RUNNING]
    recovered = recover_execution(stored, workflow=wf, registry=registry, clock=ManualClock(T0))
    assert isinstance(recovered, Completed)
    assert _attempts(recovered, "a") == [
        (1, AttemptOutcome.INTERRUPTED),  # the attempt the dead process was running
        (1, AttemptOutcome.COMPLETED),  # the same attempt, run again
    ]


def _walk_attempt_suspended_cancelled() -> None:
    outcome, *_ = _paused()
    cancelled = cancel_execution(outcome.execution)
    assert [a.outcome for a in _node(cancelled, "w").attempts] == [AttemptOutcome.CANCELLED]


N, A = NodeStatus, AttemptOutcome
NODE_WALKS: dict[tuple[NodeStatus, NodeStatus], Callable[[], None]] = {
    (N.RUNNING, N.COMPLETED): _walk_node_running_completed,
    (N.RUNNING, N.FAILED): _walk_node_running_failed,
    (N.RUNNING, N.SUSPENDED): _walk_node_running_suspended,
    (N.SUSPENDED, N.RUNNING): _walk_node_suspended_running,
    (N.SUSPENDED, N.CANCELLED): _walk_node_suspended_cancelled,
    (N.RUNNING, N.CANCELLED): _walk_node_running_cancelled,
    (N.FAILED, N.SUSPENDED): _walk_node_failed_suspended,
}
ATTEMPT_WALKS: dict[tuple[AttemptOutcome, AttemptOutcome], Callable[[], None]] = {
    (A.RUNNING, A.COMPLETED): _walk_attempt_running_completed,
    (A.RUNNING, A.FAILED): _walk_attempt_running_failed,
    (A.RUNNING, A.SUSPENDED): _walk_attempt_running_suspended,
    (A.RUNNING, A.CANCELLED): _walk_attempt_running_cancelled,
    (A.RUNNING, A.INTERRUPTED): _walk_attempt_running_interrupted,
    (A.SUSPENDED, A.RUNNING): _walk_attempt_suspended_running,
    (A.SUSPENDED, A.CANCELLED): _walk_attempt_suspended_cancelled,
}


def test_every_edge_has_a_walk() -> None:
    """Each edge of the node and attempt tables is walked below, and nothing else is."""
    assert set(NODE_WALKS) == set(NODE_EDGES)
    assert set(ATTEMPT_WALKS) == set(ATTEMPT_EDGES)


@pytest.mark.parametrize("edge", NODE_EDGES, ids=lambda e: f"{e[0].value}->{e[1].value}")
def test_each_node_edge_happens_through_the_executor(edge: tuple[NodeStatus, NodeStatus]) -> None:
    """The executor makes this node-run change (the scenario asserts what it shows)."""
    NODE_WALKS[edge]()


@pytest.mark.parametrize("edge", ATTEMPT_EDGES, ids=lambda e: f"{e[0].value}->{e[1].value}")
def test_each_attempt_edge_happens_through_the_executor(
    edge: tuple[AttemptOutcome, AttemptOutcome],
) -> None:
    """The executor makes this attempt change (the scenario asserts what it shows)."""
    ATTEMPT_WALKS[edge]()


def _walk_exec_pending_cancelled() -> None:
    outcome, *_ = _paused()
    pending = attrs.evolve(outcome.execution, status=ExecutionStatus.PENDING)
    assert cancel_execution(pending).status is ExecutionStatus.CANCELLED


def _walk_exec_suspended_running() -> None:
    outcome, wf, registry = _paused()
    resumed = resume_workflow(outcome.execution, {"ok": 1}, workflow=wf, registry=registry)
    assert resumed.execution.status is ExecutionStatus.COMPLETED


def _walk_exec_suspended_cancelled() -> None:
    outcome, *_ = _paused()
    assert cancel_execution(outcome.execution).status is ExecutionStatus.CANCELLED


def _walk_exec_failed_suspended() -> None:
    outcome, wf, registry, _ = _run(Node(key="a", type="test.down"))
    assert outcome.execution.status is ExecutionStatus.FAILED
    redriven = redrive_execution(outcome.execution, workflow=wf, registry=registry)
    assert redriven.status is ExecutionStatus.SUSPENDED


S = ExecutionStatus
EXEC_WALKS: dict[tuple[ExecutionStatus, ExecutionStatus], Callable[[], None]] = {
    (S.PENDING, S.RUNNING): _walk_node_running_completed,
    (S.PENDING, S.CANCELLED): _walk_exec_pending_cancelled,
    (S.RUNNING, S.RUNNING): _walk_attempt_running_interrupted,
    (S.RUNNING, S.SUSPENDED): _walk_node_running_suspended,
    (S.RUNNING, S.COMPLETED): _walk_node_running_completed,
    (S.RUNNING, S.FAILED): _walk_node_running_failed,
    (S.RUNNING, S.CANCELLED): _walk_node_running_cancelled,
    (S.SUSPENDED, S.RUNNING): _walk_exec_suspended_running,
    (S.SUSPENDED, S.CANCELLED): _walk_exec_suspended_cancelled,
    (S.FAILED, S.SUSPENDED): _walk_exec_failed_suspended,
}
WALKS: list[tuple[Any, str, Any, Callable[[], None]]] = [
    *((TRANSITIONS, "_EDGES", edge, walk) for edge, walk in EXEC_WALKS.items()),
    *((NODE_TRANSITIONS, "_NODE_EDGES", edge, walk) for edge, walk in NODE_WALKS.items()),
    *((ATTEMPT_TRANSITIONS, "_ATTEMPT_EDGES", edge, walk) for edge, walk in ATTEMPT_WALKS.items()),
]


def test_every_execution_edge_has_a_walk() -> None:
    """Each edge of the executions' table is walked below, and nothing else is."""
    assert set(EXEC_WALKS) == set(EDGES)


@pytest.mark.parametrize(
    ("table", "name", "edge", "walk"),
    WALKS,
    ids=[f"{name[1:-6] or 'exec'}:{a.value}->{b.value}" for _, name, (a, b), _ in WALKS],
)
def test_removing_an_edge_makes_its_walk_refuse(
    monkeypatch: pytest.MonkeyPatch, table: Any, name: str, edge: Any, walk: Callable[[], None]
) -> None:
    """Every status change goes through the tables at run time: without the edge it takes
    (the table and the views the checks read), the walk that takes it is refused."""
    from prana import _state

    src, dst = edge
    walk()  # the tables as they are: the walk goes through
    monkeypatch.setitem(table, src, table[src] - {dst})
    monkeypatch.setattr(_state, name, _state.edges_by_value(table))
    if src.value == "running" and table is not TRANSITIONS:  # the hot sites' view of the row
        view = "NODE_FROM_RUNNING" if table is NODE_TRANSITIONS else "ATTEMPT_FROM_RUNNING"
        monkeypatch.setattr(_state, view, _state.values_from(table, src))
    with pytest.raises(ResumeError, match="cannot become"):
        walk()


def _with_record(execution: WorkflowExecution, key: str, **changes: Any) -> WorkflowExecution:
    record = attrs.evolve(_node(execution, key), **changes)
    return attrs.evolve(execution, node_executions={**execution.node_executions, key: (record,)})


def test_resuming_a_node_whose_record_is_not_suspended_is_refused() -> None:
    """A hand-edited record (completed node still named as suspended) is refused, not re-run."""
    outcome, wf, registry = _paused()
    edited = _with_record(outcome.execution, "w", status=NodeStatus.COMPLETED)
    with pytest.raises(ResumeError, match="'w': a run that is completed cannot become running"):
        resume_workflow(edited, {"ok": True}, workflow=wf, registry=registry)


def test_resuming_a_pause_whose_attempt_is_not_paused_is_refused() -> None:
    """A paused node whose last attempt already completed is an inconsistent record."""
    outcome, wf, registry = _paused()
    record = _node(outcome.execution, "w")
    done = attrs.evolve(record.attempts[-1], outcome=AttemptOutcome.COMPLETED)
    edited = _with_record(outcome.execution, "w", attempts=(done,))
    with pytest.raises(ResumeError, match="attempt 1, which is completed, cannot become running"):
        resume_workflow(edited, {"ok": True}, workflow=wf, registry=registry)
    with pytest.raises(ResumeError, match="has no attempt"):
        resume_workflow(
            _with_record(outcome.execution, "w", attempts=()), {}, workflow=wf, registry=registry
        )


def test_cancelling_a_node_whose_record_is_final_is_refused() -> None:
    """Cancel never turns a completed record into a cancelled one."""
    outcome, *_ = _paused()
    edited = _with_record(outcome.execution, "w", status=NodeStatus.COMPLETED)
    with pytest.raises(ResumeError, match="completed cannot become cancelled"):
        cancel_execution(edited)


# -- the shell's status sets come from the tables -------------------------------------------


def test_the_shells_final_statuses_are_the_tables() -> None:
    """The runner, the web view and the page read "final" from the tables, not a copy."""
    from scheduling._runner import FINAL_STATUSES
    from scheduling.web import _html, _views

    assert FINAL_STATUSES is FINAL
    assert frozenset(_views.FINAL) == {s.value for s in FINAL}
    assert tuple(s.value for s in ExecutionStatus) == _html.STATUSES


@pytest.mark.parametrize("status", list(ExecutionStatus), ids=lambda s: s.value)
def test_every_status_passes_the_web_and_cli_list_filters(
    status: ExecutionStatus, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A status the enum has is a filter both the web list and ``prana list --status`` take
    (a new status added with its table rows must not be refused by one of them)."""
    from starlette.testclient import TestClient

    from scheduling import Runner
    from scheduling._cli import main
    from scheduling.adapters.manual import ManualScheduler
    from scheduling.stores.memory import MemoryStore
    from scheduling.stores.sqlite import SQLiteStore
    from scheduling.web import create_app

    token = "an-operator-token-long-enough"
    clock = ManualClock(T0)
    runner = Runner(Registry(), MemoryStore(), ManualScheduler(clock=clock), clock)
    with runner, TestClient(create_app(runner, token=token)) as client:
        auth = {"authorization": f"Bearer {token}"}
        assert client.get(f"/api/executions?status={status.value}", headers=auth).status_code == 200
        page = client.get(f"/executions?status={status.value}", headers=auth)
        assert page.status_code == 200
        assert f'<option value="{status.value}" selected>' in page.text
    db = str(tmp_path / "prana.db")
    SQLiteStore(db).close()
    assert main(["list", "--db", db, "--status", status.value]) == 0
    assert capsys.readouterr().out.strip() == "no executions"
