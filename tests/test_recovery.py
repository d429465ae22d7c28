"""Checkpoints and recovery in the core: a process that dies inside an action loses nothing.

``checkpoint=`` hands the shell a ``running`` snapshot before each action call;
``recover_execution`` takes such a snapshot up again: the attempt in flight is closed
``interrupted`` and run again (same attempt, same idempotency key), and an attempt
interrupted too often in a row fails instead of looping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from doubles import T0, Died, workflow
from hypothesis import given
from hypothesis import strategies as st
from strategies import Answers, Scenario, make_registry, scenarios
from test_properties import PROPERTY_SETTINGS, drive

from prana import (
    AttemptOutcome,
    Completed,
    Event,
    EventType,
    ExecutionStatus,
    Failed,
    InvalidSettingsError,
    Node,
    NodeSettings,
    NodeStatus,
    Outcome,
    Registry,
    ResumeError,
    RetryData,
    RetryPolicy,
    Suspend,
    TimerData,
    WorkflowExecution,
    aexecute_workflow,
    dumps,
    execute_workflow,
    loads,
    resume_workflow,
)
from prana.shell import arecover_execution, expire_webhook, recover_execution
from prana.testing import ManualClock, set_testing


class Recorder:
    """An action that records each call's idempotency key and attempt, then returns."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, params: Any, ctx: Any) -> Any:
        self.calls.append((ctx.idempotency_key, ctx.attempt))
        if ctx.attempt == 1 and params.get("fail_first"):
            raise ConnectionError("first attempt fails")
        return {"attempt": ctx.attempt}


def setup(**params: Any) -> tuple[Registry, Recorder, Any]:
    registry = Registry()
    recorder = Recorder()
    registry.register("test.rec", recorder)
    retry = NodeSettings(retry=RetryPolicy(initial_delay=1, max_attempts=3))
    return (
        registry,
        recorder,
        workflow(Node(key="a", type="test.rec", params=params, settings=retry)),
    )


def dies_at(node: str, saved: list[WorkflowExecution], *, times: int = 1) -> Any:
    """A checkpoint that keeps every snapshot and "dies" the first ``times`` times ``node`` runs."""
    left = [times]

    def checkpoint(execution: WorkflowExecution) -> None:
        saved.append(execution)
        running = execution.node(node)
        if running is not None and running.status is NodeStatus.RUNNING and left[0] > 0:
            left[0] -= 1
            raise Died

    return checkpoint


def test_a_checkpoint_sees_each_attempt_open_before_its_action_runs() -> None:
    """Before each action call: the execution running, the node running, its attempt open."""
    registry, recorder, wf = setup()
    saved: list[WorkflowExecution] = []
    outcome = execute_workflow(
        wf, None, registry=registry, clock=ManualClock(T0), checkpoint=saved.append
    )
    assert isinstance(outcome, Completed)
    assert [s.status for s in saved] == [ExecutionStatus.RUNNING] * 2  # the trigger, then a
    snapshot = saved[1]
    record = snapshot.node("a")
    assert record is not None
    assert record.status is NodeStatus.RUNNING
    assert [(a.number, a.outcome, a.ended_at) for a in record.attempts] == [
        (1, AttemptOutcome.RUNNING, None)
    ]
    assert snapshot.node("start") is not None
    assert snapshot.lease_expires_at is None  # the shell sets the lease, not the core
    assert loads(dumps(snapshot)) == snapshot
    assert recorder.calls == [(f"{outcome.execution.id}:a:0", 1)]


def test_without_a_checkpoint_nothing_changes() -> None:
    """Same run, no checkpoint: the same outcome (the seam costs nothing when unused)."""
    registry, _, wf = setup()
    plain = execute_workflow(wf, None, registry=registry, clock=ManualClock(T0), execution_id="x")
    saved: list[WorkflowExecution] = []
    checked = execute_workflow(
        wf,
        None,
        registry=registry,
        clock=ManualClock(T0),
        execution_id="x",
        checkpoint=saved.append,
    )
    assert checked == plain


def test_recovery_reruns_the_interrupted_attempt_with_the_same_key() -> None:
    """Died inside attempt 1: recovery closes it interrupted and runs attempt 1 again."""
    registry, recorder, wf = setup()
    saved: list[WorkflowExecution] = []
    with pytest.raises(Died):
        execute_workflow(
            wf, None, registry=registry, clock=ManualClock(T0), checkpoint=dies_at("a", saved)
        )
    stored = loads(dumps(saved[-1]))  # what the store kept
    assert recorder.calls == []  # it died before (or inside) the action
    events: list[Event] = []
    outcome = recover_execution(
        stored, workflow=wf, registry=registry, clock=ManualClock(T0), observers=[events.append]
    )
    assert isinstance(outcome, Completed)
    record = outcome.execution.node("a")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.COMPLETED),
    ]
    interrupted = record.attempts[0]
    assert interrupted.error is not None
    assert interrupted.error.code == "interrupted"
    assert recorder.calls == [(f"{stored.id}:a:0", 1)]
    recovered = [e for e in events if e.type is EventType.EXECUTION_RECOVERED]
    assert [(e.node_key, e.attempt) for e in recovered] == [("a", 1)]


def test_recovery_of_a_retry_keeps_its_attempt_number() -> None:
    """Attempt 2 (a retry) interrupted: the ledger shows 1 failed, 2 interrupted, 2 completed."""
    registry, recorder, wf = setup(fail_first=True)
    clock = ManualClock(T0)
    first = execute_workflow(wf, None, registry=registry, clock=clock)
    assert isinstance(first, Suspend)
    clock.advance(1)
    saved: list[WorkflowExecution] = []
    with pytest.raises(Died):
        resume_workflow(
            first.execution,
            workflow=wf,
            registry=registry,
            clock=clock,
            checkpoint=dies_at("a", saved),
        )
    outcome = recover_execution(
        loads(dumps(saved[-1])), workflow=wf, registry=registry, clock=clock
    )
    assert isinstance(outcome, Completed)
    assert outcome.output == {"attempt": 2}
    record = outcome.execution.node("a")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.FAILED),
        (2, AttemptOutcome.INTERRUPTED),
        (2, AttemptOutcome.COMPLETED),
    ]
    assert [key for key, _ in recorder.calls] == [f"{first.execution.id}:a:0"] * 2


@pytest.mark.parametrize(
    ("on_error", "status"),
    [("stop_workflow", ExecutionStatus.FAILED), ("continue", ExecutionStatus.COMPLETED)],
)
def test_an_attempt_interrupted_too_often_fails_and_on_error_decides(
    on_error: str, status: ExecutionStatus
) -> None:
    """A poison attempt (its process dies every time) fails after max_interruptions in a row."""
    registry = Registry()
    recorder = Recorder()
    registry.register("test.rec", recorder)
    wf = workflow(Node(key="a", type="test.rec", settings=NodeSettings(on_error=on_error)))  # type: ignore[arg-type]
    saved: list[WorkflowExecution] = []
    checkpoint = dies_at("a", saved, times=2)
    with pytest.raises(Died):
        execute_workflow(wf, None, registry=registry, clock=ManualClock(T0), checkpoint=checkpoint)
    with pytest.raises(Died):
        recover_execution(
            saved[-1],
            workflow=wf,
            registry=registry,
            clock=ManualClock(T0),
            checkpoint=checkpoint,
            max_interruptions=2,
        )
    outcome = recover_execution(
        saved[-1],
        workflow=wf,
        registry=registry,
        clock=ManualClock(T0),
        checkpoint=checkpoint,
        max_interruptions=2,
    )
    assert outcome.execution.status is status
    assert recorder.calls == []  # never run a third time
    record = outcome.execution.node("a")
    assert record is not None
    assert [(a.number, a.outcome) for a in record.attempts] == [
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.INTERRUPTED),
        (1, AttemptOutcome.FAILED),
    ]
    error = record.attempts[-1].error
    assert error is not None
    assert (error.code, error.type) == ("interrupted", "Interrupted")
    assert "interrupted 2 times in a row" in error.message
    if isinstance(outcome, Failed):
        assert outcome.error.code == "interrupted"


def test_recover_refuses_what_is_not_a_checkpoint() -> None:
    """A suspended or completed execution, or a bad argument, is a clear error."""
    registry, _, wf = setup(fail_first=True)
    suspended = execute_workflow(wf, None, registry=registry, clock=ManualClock(T0))
    with pytest.raises(ResumeError, match="is suspended, not running"):
        recover_execution(suspended.execution, workflow=wf, registry=registry)
    saved: list[WorkflowExecution] = []
    with pytest.raises(Died):
        execute_workflow(
            wf, None, registry=registry, clock=ManualClock(T0), checkpoint=dies_at("a", saved)
        )
    with pytest.raises(InvalidSettingsError, match="max_interruptions=0"):
        recover_execution(saved[-1], workflow=wf, registry=registry, max_interruptions=0)
    with pytest.raises(InvalidSettingsError, match="checkpoint="):
        execute_workflow(wf, None, registry=registry, checkpoint="save")  # type: ignore[arg-type]


def test_async_twins_take_checkpoints_and_recover() -> None:
    """``aexecute_workflow`` checkpoints too, and ``arecover_execution`` takes it up."""
    registry, recorder, wf = setup()
    saved: list[WorkflowExecution] = []
    checkpoint = dies_at("a", saved)
    with pytest.raises(Died):
        asyncio.run(
            aexecute_workflow(
                wf, None, registry=registry, clock=ManualClock(T0), checkpoint=checkpoint
            )
        )
    outcome = asyncio.run(
        arecover_execution(saved[-1], workflow=wf, registry=registry, clock=ManualClock(T0))
    )
    assert isinstance(outcome, Completed)
    assert len(recorder.calls) == 1


def without_interruptions(execution: WorkflowExecution) -> WorkflowExecution:
    """``execution`` with every interrupted attempt dropped from its ledgers."""
    import attrs

    runs = {
        key: tuple(
            attrs.evolve(
                run,
                attempts=tuple(
                    a for a in run.attempts if a.outcome is not AttemptOutcome.INTERRUPTED
                ),
            )
            for run in group
        )
        for key, group in execution.node_executions.items()
    }
    return attrs.evolve(execution, node_executions=runs)


def drive_dying_at(scenario: Scenario, death: int) -> Outcome:
    """``drive`` (test_properties) with the process dying at checkpoint ``death``, then recovered.

    The snapshot saved at that checkpoint goes through ``dumps``/``loads`` (a store), and
    ``recover_execution`` takes it up at the same time; the drive then goes on as usual.
    """
    registry = make_registry(scenario.script)
    clock = ManualClock(T0)
    seen = [0]
    saved: list[WorkflowExecution] = []

    def checkpoint(execution: WorkflowExecution) -> None:
        seen[0] += 1
        if seen[0] == death:
            saved.append(loads(dumps(execution)))
            raise Died

    wf = scenario.workflow
    common: dict[str, Any] = {"registry": registry, "clock": clock, "checkpoint": checkpoint}

    def guarded(call: Any) -> Outcome:
        try:
            result: Outcome = call()
        except Died:
            pass  # recovered outside the handler: a traceback kept must not chain Died
        else:
            return result
        return recover_execution(saved[-1], workflow=wf, **common)

    with set_testing(False):
        outcome = guarded(
            lambda: execute_workflow(
                wf, scenario.input, execution_id=scenario.execution_id, **common
            )
        )
        answers = Answers(scenario, clock)
        for outcomes in range(1, 400):
            if not isinstance(outcome, Suspend):
                return outcome
            execution = outcome.execution
            expire, resume_data = answers.answer(outcome.data, outcomes)
            if expire:
                outcome = guarded(lambda e=execution: expire_webhook(e, workflow=wf, **common))
            else:
                # several pauses: data goes to the one the outcome describes, named
                by_time = isinstance(outcome.data, RetryData | TimerData)
                node = None if by_time else execution.suspended_node
                outcome = guarded(
                    lambda e=execution, d=resume_data, n=node: resume_workflow(
                        e, d, workflow=wf, node=n, **common
                    )
                )
    raise AssertionError("the run never ends")


@PROPERTY_SETTINGS
@given(scenarios(), st.integers(min_value=1, max_value=12))
def test_dying_at_any_checkpoint_and_recovering_ends_like_an_uninterrupted_run(
    scenario: Scenario, death: int
) -> None:
    """Die at any checkpoint, recover from the stored snapshot: the same end, one interruption."""
    final = drive(scenario)[-1].outcome
    recovered = drive_dying_at(scenario, death)
    assert recovered.execution is not None
    assert final.execution is not None
    interrupted = [
        a
        for group in recovered.execution.node_executions.values()
        for run in group
        for a in run.attempts
        if a.outcome is AttemptOutcome.INTERRUPTED
    ]
    assert len(interrupted) <= 1
    assert without_interruptions(recovered.execution) == final.execution
    assert type(recovered) is type(final)
