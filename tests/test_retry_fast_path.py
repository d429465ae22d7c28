"""The retry cycle's fast paths (issue 11): each test fails if one stops applying.

No timings: each test counts the work a fast path saves (clock readings, enum lookups)
or checks the rule the fast path relies on.
"""

from __future__ import annotations

import copy
import inspect
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from doubles import T0

from prana import (
    ActionContext,
    Completed,
    Connection,
    ExecutionStatus,
    Node,
    NodeSettings,
    NodeStatus,
    Registry,
    Suspend,
    Workflow,
    _entry,
    execute_workflow,
    resume_workflow,
)
from prana._decision import FAST_BUILT
from prana._entry import new_execution_id
from prana._frontier import _EMPTY_COUNTS, new_pending
from prana._hooks import NO_TOKENS
from prana._model import AttemptOutcome, WorkflowExecution, hot_record_problems, with_lease
from prana._state import (
    _ATTEMPT_EDGES,
    _EDGES,
    _NODE_EDGES,
    ATTEMPT_TRANSITIONS,
    NODE_TRANSITIONS,
    TRANSITIONS,
)
from prana.testing import ManualClock


def _fails_once(params: Any, ctx: ActionContext) -> Any:
    if ctx.attempt == 1:
        raise ConnectionError("down")
    return ctx.attempt


def _retry_workflow() -> Workflow:
    return Workflow(
        id="retry0",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="test.fails_once",
                settings=NodeSettings(retry_on_failed=True, retry_delay_ms=0),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )


class CountingClock:
    """A clock that moves one millisecond per reading and counts the readings."""

    def __init__(self) -> None:
        self.now = T0
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        self.now += timedelta(milliseconds=1)
        return self.now


@pytest.fixture
def flaky(registry: Registry) -> Registry:
    """The shared test registry, with ``test.fails_once`` (fails its first attempt)."""
    registry.register("test.fails_once", _fails_once)
    return registry


def test_a_retry_cycle_reads_the_clock_once_per_moment(flaky: Registry) -> None:
    """Without observers the start reads the clock 3 times, the resume 2 (the entry check's
    reading starts the run; an attempt's end is the next start and the record's update).

    More readings mean a ``now_hint`` stopped being taken; each costs a datetime.
    """
    clock = CountingClock()
    wf = _retry_workflow()
    paused = execute_workflow(wf, 0, registry=flaky, clock=clock)
    assert isinstance(paused, Suspend)
    assert paused.kind == "retry"
    assert clock.reads == 3
    execution = paused.execution
    assert execution is not None
    start, call = execution.node_executions["start"][0], execution.node_executions["call"][0]
    # each reading is where the one before it would have been taken: times stay ordered
    assert execution.started_at == start.started_at
    assert start.completed_at == call.started_at == call.attempts[0].started_at
    assert execution.updated_at == call.attempts[0].ended_at
    assert execution.started_at is not None
    assert execution.updated_at is not None
    assert execution.started_at < call.started_at < execution.updated_at
    clock.reads = 0
    done = resume_workflow(execution, workflow=wf, registry=flaky, clock=clock)
    assert isinstance(done, Completed)
    assert clock.reads == 2
    record = done.execution.node_executions["call"][0]
    assert record.status is NodeStatus.COMPLETED
    assert [a.outcome for a in record.attempts] == [AttemptOutcome.FAILED, AttemptOutcome.COMPLETED]
    second = record.attempts[1]
    assert second.started_at is not None
    assert second.ended_at is not None
    assert execution.updated_at < second.started_at < second.ended_at
    assert done.execution.updated_at == done.execution.completed_at == second.ended_at


def test_a_resumed_pause_reads_the_clock_after_its_callback(flaky: Registry) -> None:
    """The entry check's reading is not kept past the resume: an execution that fails in a
    ``resume`` callback is stamped after the callback ran, not when it was loaded."""
    clock = CountingClock()

    def pause(params: Any, ctx: ActionContext) -> Any:
        return Suspend("approval", {"ask": 1})

    def resume(params: Any, ctx: ActionContext, data: Any) -> Any:
        clock.now += timedelta(hours=1)  # the callback takes an hour
        raise ValueError("refused")

    flaky.register("test.pause", pause, resume=resume)
    wf = Workflow(
        id="pause",
        nodes=[Node(key="start", type="manual.trigger"), Node(key="wait", type="test.pause")],
        connections=[Connection(from_node="start", to_node="wait")],
    )
    paused = execute_workflow(wf, None, registry=flaky, clock=clock)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    loaded_at = clock.now
    failed = resume_workflow(paused.execution, {"ok": 1}, workflow=wf, registry=flaky, clock=clock)
    assert failed.execution is not None
    assert failed.execution.status is ExecutionStatus.FAILED
    assert failed.execution.updated_at is not None
    assert failed.execution.updated_at > loaded_at + timedelta(hours=1)


@pytest.mark.parametrize(
    ("table", "edges"),
    [
        (TRANSITIONS, _EDGES),
        (NODE_TRANSITIONS, _NODE_EDGES),
        (ATTEMPT_TRANSITIONS, _ATTEMPT_EDGES),
    ],
)
def test_the_transition_checks_read_the_tables_by_value(table: Any, edges: Any) -> None:
    """The checks look edges up as value pairs (str hashing in C, not Enum.__hash__ in
    Python): the pairs are exactly the table's edges."""
    assert edges == {(src.value, dst.value) for src, targets in table.items() for dst in targets}


@pytest.mark.parametrize("cls", list(FAST_BUILT), ids=lambda c: c.__name__)
def test_the_retry_decisions_records_keep_the_fast_constructor_rules(cls: type[Any]) -> None:
    """AttemptView, RetryDecision and RetryExplanation are built without ``__init__`` at every
    failed attempt: a validator or weakref slot added later would be skipped or refused."""
    assert hot_record_problems(cls) == []
    build = FAST_BUILT[cls]
    names = [a.name for a in attrs.fields(cls)]
    record = build(*range(len(names)))
    assert type(record) is cls
    assert [getattr(record, n) for n in names] == list(range(len(names)))
    assert "_twin()" in inspect.getsource(build)


def test_a_checkpoint_reuses_the_rows_of_nodes_it_did_not_change(flaky: Registry) -> None:
    """Each snapshot shares every node's tuple of records that did not change since the one
    before (a checkpoint copies a dict of node keys, never the rows): the nodes that ran
    in between are the only new tuples."""
    keys = ["a", "b", "c"]
    wf = Workflow(
        id="chain",
        nodes=[Node(key="start", type="manual.trigger")]
        + [Node(key=k, type="test.add") for k in keys],
        connections=[
            Connection(from_node=a, to_node=b) for a, b in zip(["start", *keys], keys, strict=False)
        ],
    )
    snapshots: list[Any] = []
    done = execute_workflow(wf, 0, registry=flaky, checkpoint=snapshots.append)
    assert isinstance(done, Completed)
    assert done.output == 3
    assert len(snapshots) == 4  # one before each action call: start, a, b, c
    # between two checkpoints one node completed and the next one's record opened
    expected = [{"start", "a"}, {"a", "b"}, {"b", "c"}]
    for before, after, ran in zip(snapshots, snapshots[1:], expected, strict=False):
        changed = {
            k
            for k, rows in after.node_executions.items()
            if rows is not before.node_executions.get(k)
        }
        assert changed == ran
    last = snapshots[-1]
    assert all(
        done.execution.node_executions[k] is last.node_executions[k] for k in ["start", "a", "b"]
    )


def test_with_lease_is_evolve_through_the_slot_twin(flaky: Registry) -> None:
    """with_lease(execution, at) equals attrs.evolve(execution, lease_expires_at=at) and
    builds through the slot twin (a runner calls it at every checkpoint and renewal)."""
    paused = execute_workflow(_retry_workflow(), 0, registry=flaky)
    execution = paused.execution
    assert execution is not None
    at = T0 + timedelta(seconds=30)
    leased = with_lease(execution, at)
    assert type(leased) is WorkflowExecution
    assert leased == attrs.evolve(execution, lease_expires_at=at)
    assert leased.lease_expires_at == at
    assert execution.lease_expires_at is None
    assert with_lease(leased, None) == execution
    assert "_twin()" in inspect.getsource(with_lease)


def test_execution_ids_are_fresh_random_hex() -> None:
    """Ids handed out from the pool are 32 hex digits, never twice, and a forked child
    forgets the parent's pool (so it reads its own random bytes)."""
    ids = [new_execution_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    new_execution_id()
    assert _entry._IDS  # the rest of the pool waits in memory
    _entry._forget_ids()  # what os.register_at_fork runs in a child
    assert not _entry._IDS
    assert new_execution_id() not in ids


def test_runs_without_joins_or_tokens_share_empty_containers_nobody_writes(
    flaky: Registry,
) -> None:
    """A run without AND-joins shares one empty dict for its join counts, and a run that
    mints no resume token one for its tokens; running such workflows (the retry cycle, a
    wait handed a ``$webhooks`` path) leaves both empty, and a join graph gets its own."""
    wf = _retry_workflow()
    run = _entry.new_run(wf, 0, flaky, None, None, None, None, None)
    assert run.live is _EMPTY_COUNTS
    assert run.blocked is _EMPTY_COUNTS
    assert run.parked is _EMPTY_COUNTS
    assert run.issued is NO_TOKENS
    paused = execute_workflow(wf, 0, registry=flaky)
    assert isinstance(paused, Suspend)
    assert paused.execution is not None
    done = resume_workflow(paused.execution, None, workflow=wf, registry=flaky)
    assert isinstance(done, Completed)
    flaky.register("test.mail", lambda params, ctx: params["link"])
    hook = Workflow(
        id="hook",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="mail", type="test.mail", params={"link": "{{ $webhooks.wait }}"}),
            Node(key="wait", type="wait.wait", params={"mode": "webhook"}),
        ],
        connections=[
            Connection(from_node="start", to_node="mail"),
            Connection(from_node="mail", to_node="wait"),
        ],
    )
    waiting = execute_workflow(hook, 0, registry=flaky)
    assert isinstance(waiting, Suspend)
    assert waiting.kind == "webhook"
    assert _EMPTY_COUNTS == {}
    assert NO_TOKENS == {}
    join = Workflow(
        id="join",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="a", type="test.fails_once"),
            Node(key="b", type="test.fails_once"),
            Node(key="merge", type="data.merge"),
        ],
        connections=[
            Connection(from_node="start", to_node="a"),
            Connection(from_node="start", to_node="b"),
            Connection(from_node="a", to_node="merge", to_port="left"),
            Connection(from_node="b", to_node="merge", to_port="right"),
        ],
    )
    joined = _entry.new_run(join, 0, flaky, None, None, None, None, None)
    assert joined.blocked is not _EMPTY_COUNTS
    assert joined.live is not _EMPTY_COUNTS
    assert joined.parked is not _EMPTY_COUNTS


def test_runs_held_in_lists_resume_as_the_tuples_the_engine_keeps(flaky: Registry) -> None:
    """A record built by hand with lists of runs resumes as the same record with tuples
    would: the load copies each list into a tuple (the engine replaces a node's tuple, so
    a list left in place would come back in the new execution)."""
    wf = _retry_workflow()
    paused = execute_workflow(wf, 0, registry=flaky, clock=ManualClock(), execution_id="e")
    assert isinstance(paused, Suspend)
    execution = paused.execution
    assert execution is not None
    lists: dict[str, Any] = {k: list(v) for k, v in execution.node_executions.items()}
    listed = attrs.evolve(execution, node_executions=lists)
    expected = resume_workflow(execution, workflow=wf, registry=flaky, clock=ManualClock())
    done = resume_workflow(listed, workflow=wf, registry=flaky, clock=ManualClock())
    assert isinstance(done, Completed)
    assert done.execution == expected.execution
    assert {type(runs) for runs in done.execution.node_executions.values()} == {tuple}


def test_enter_and_leave_without_joins_change_only_pending(flaky: Registry) -> None:
    """Without AND-joins (``feeds`` is None) the engine's start, settles and ``deliver`` set
    and pop ``pending`` themselves instead of calling ``enter`` and ``leave``: those must
    change nothing else there, or the inline paths would skip it."""
    run = _entry.new_run(_retry_workflow(), 0, flaky, None, None, None, None, None)
    assert run.feeds is None
    names = sorted({n for cls in type(run).__mro__ for n in getattr(cls, "__slots__", ())})

    def state() -> dict[str, Any]:  # containers copied, so a change in place shows
        values = {n: getattr(run, n, None) for n in names}
        return {n: copy.copy(v) if type(v) in (dict, list) else v for n, v in values.items()}

    before = state()
    head = new_pending(3, {"main": ("start", "main", 3)})
    run.enter("call", head)
    entered = state()
    assert {n for n in names if entered[n] != before[n]} == {"pending"}
    assert run.pending == {"call": head}
    run.leave("call")
    assert state() == before


def test_the_usual_call_takes_the_answers_of_the_checks_it_skips(flaky: Registry) -> None:
    """``new_run`` and ``loaded_run`` given a registry and no clock, env or observers take
    ``checked_call``'s answer without calling it, and read the default clock without
    ``read_clock``: both must stay what those calls answer."""
    assert _entry.checked_call(flaky, None, None, None) == (
        flaky,
        _entry._utcnow,
        _entry._EMPTY_ENV,
        (),
    )
    assert _entry.checked_call(flaky, None, None, None)[2] is _entry._EMPTY_ENV
    clock, reading = _entry.read_clock(_entry._utcnow)
    assert clock is _entry._utcnow
    assert type(reading) is datetime
    assert reading.tzinfo is timezone.utc  # read_clock's first branch: taken as it is
    run = _entry.new_run(_retry_workflow(), 0, flaky, None, None, None, None, None)
    assert (run.clock, run.env, run.observers) == (_entry._utcnow, _entry._EMPTY_ENV, ())
    assert type(run.now_hint) is datetime
