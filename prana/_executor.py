"""The executor: runs a workflow until it completes, fails or must pause.

The public entry points live here; the work is split by concern into private modules:

- ``prana._entry``: the argument checks every call makes before anything runs;
- ``prana._engine``: the generator that runs nodes and attempts (its theory of operation
  is at the top of that module), with ``prana._noderun`` for its mutable working records
  and ``prana._pause`` for an action's pause (a ``Suspend`` it returns);
- ``prana._drivers``: the sync and async drivers that make the engine's action calls;
- ``prana._jsoncheck``: what is JSON-native;
- ``prana._state``: the transition tables the engine obeys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from prana._drivers import drive_async, drive_sync
from prana._engine import Checkpoint, Clock, Run
from prana._entry import (
    check_checkpoint,
    check_clock,
    check_execution,
    checked_call,
    loaded_run,
    new_run,
    prepare_recover,
    running_node,
)
from prana._errors import ResumeError
from prana._events import Event, EventType, Observer, emit
from prana._model import (
    ErrorCode,
    ErrorInfo,
    ExecutionStatus,
    Outcome,
    ParentRef,
    Workflow,
    WorkflowExecution,
)
from prana._noderun import close_paused
from prana._recovery import check_max_interruptions, recover
from prana._registry import Registry
from prana._state import (
    FINAL,
    check_transition,
)


def execute_workflow(
    workflow: Workflow,
    input: Any = None,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    execution_id: str | None = None,
    parent: ParentRef | None = None,
    trace_context: Mapping[str, str] | None = None,
    checkpoint: Checkpoint | None = None,
) -> Outcome:
    """Run ``workflow`` from its trigger until it completes, fails or suspends.

    Never raises for anything a node does; raises ``InvalidWorkflowError`` for a workflow
    that cannot run. Async actions are run to completion on a private event loop; inside a
    running loop use ``aexecute_workflow``. ``trace_context`` (W3C trace headers) is kept
    in the execution, unchanged by every later step, for tracing in the shell.

    ``checkpoint``, if given, is called before each action call with the execution as it
    stands: ``running``, the attempt about to run open in its node's record. A shell saves
    it, so a process that dies inside an action leaves a record ``recover_execution`` can
    take up. If it raises, the run stops there (the action is not called) and the error
    propagates. Without it nothing changes, at no cost.
    """
    run = new_run(
        workflow, input, registry, clock, env, observers, execution_id, parent, trace_context
    )
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return drive_sync(run.start())


def resume_workflow(
    execution: WorkflowExecution,
    resume_data: Any = None,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    checkpoint: Checkpoint | None = None,
    node: str | None = None,
) -> Outcome:
    """Continue a suspended execution; returns a new execution, the given one is untouched.

    A retry suspension re-runs its node with input rebuilt from ``execution`` (resume data
    is ignored); a pause hands ``resume_data`` to the node's ``resume`` callback. With
    several pauses, ``node`` names the one to resume; with none named, every retry and
    timer due at the clock's now resumes, or else the one pause waiting for data
    (``ResumeError`` when nothing is due, or several wait for data).
    ``checkpoint`` as for ``execute_workflow`` (not called before a ``resume`` callback,
    whose resume data a checkpoint does not keep: the execution stays suspended until the
    outcome is saved).
    """
    run = loaded_run(execution, resume_data, workflow, registry, clock, env, observers, node)
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return drive_sync(run.resume(execution, resume_data))


async def aexecute_workflow(
    workflow: Workflow,
    input: Any = None,
    *,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    execution_id: str | None = None,
    parent: ParentRef | None = None,
    trace_context: Mapping[str, str] | None = None,
    checkpoint: Checkpoint | None = None,
) -> Outcome:
    """``execute_workflow`` for async code: awaits async actions, calls sync ones."""
    run = new_run(
        workflow, input, registry, clock, env, observers, execution_id, parent, trace_context
    )
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return await drive_async(run.start())


async def aresume_workflow(
    execution: WorkflowExecution,
    resume_data: Any = None,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    checkpoint: Checkpoint | None = None,
    node: str | None = None,
) -> Outcome:
    """``resume_workflow`` for async code."""
    run = loaded_run(execution, resume_data, workflow, registry, clock, env, observers, node)
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return await drive_async(run.resume(execution, resume_data))


def _recovering_run(
    execution: WorkflowExecution,
    workflow: Workflow,
    registry: Registry | None,
    clock: Clock | None,
    env: Mapping[str, Any] | None,
    observers: Sequence[Observer] | None,
    checkpoint: Checkpoint | None,
    max_interruptions: int,
) -> tuple[Run, str]:
    checked_registry, checked_clock, checked_env, checked_observers = checked_call(
        registry, clock, env, observers
    )
    check_max_interruptions(max_interruptions)
    graph, key = prepare_recover(execution, workflow, checked_registry)
    run = Run.from_execution(
        graph,
        execution,
        clock=check_clock(checked_clock),
        env=checked_env,
        observers=checked_observers,
        limits=checked_registry.limits,
    )
    run.use_secrets(checked_registry.secrets)
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return run, key


def recover_execution(
    execution: WorkflowExecution,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    checkpoint: Checkpoint | None = None,
    max_interruptions: int = 3,
) -> Outcome:
    """Take up a ``running`` execution its process left (it died inside an action).

    ``execution`` is a checkpoint (see ``execute_workflow``'s ``checkpoint``): its open
    attempt is closed ``interrupted`` and the same attempt runs again (same attempt number
    and run index, so the same ``ctx.idempotency_key``: delivery is at least once), then
    the workflow goes on as usual. After ``max_interruptions`` interruptions of that
    attempt in a row it is not run again: it fails with a non-retryable ``interrupted``
    error and ``on_error`` decides, so an execution that kills its process every time
    ends instead of looping. Raises ``ResumeError`` for an execution that is not running.
    """
    run, key = _recovering_run(
        execution, workflow, registry, clock, env, observers, checkpoint, max_interruptions
    )
    return drive_sync(recover(run, execution, key, max_interruptions))


async def arecover_execution(
    execution: WorkflowExecution,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    checkpoint: Checkpoint | None = None,
    max_interruptions: int = 3,
) -> Outcome:
    """``recover_execution`` for async code."""
    run, key = _recovering_run(
        execution, workflow, registry, clock, env, observers, checkpoint, max_interruptions
    )
    return await drive_async(recover(run, execution, key, max_interruptions))


def expire_webhook(
    execution: WorkflowExecution,
    *,
    workflow: Workflow,
    registry: Registry | None = None,
    clock: Clock | None = None,
    env: Mapping[str, Any] | None = None,
    observers: Sequence[Observer] | None = None,
    checkpoint: Checkpoint | None = None,
) -> Outcome:
    """End a webhook wait whose ``expires_at`` passed: its node fails with ``WebhookTimeout``.

    The failure is not retried; the node's ``on_error`` applies (so a workflow can route a
    timeout to its error port). The shell calls this when a webhook alarm fires first.
    ``checkpoint`` as for ``execute_workflow``.
    """
    check_execution(execution, "expire_webhook")
    suspension = execution.suspension
    if suspension is None or suspension.kind != "webhook":
        kind = suspension.kind if suspension is not None else None
        raise ResumeError(
            f"execution {execution.id!r} is not waiting on a webhook (suspension kind {kind!r})"
        )
    run = loaded_run(
        execution, None, workflow, registry, clock, env, observers, execution.suspended_node
    )
    if checkpoint is not None:  # a run starts with none
        run.checkpoint = check_checkpoint(checkpoint)
    return drive_sync(run.expire(execution))


def cancel_execution(
    execution: WorkflowExecution,
    reason: str | None = None,
    *,
    clock: Clock | None = None,
    observers: Sequence[Observer] | None = None,
) -> WorkflowExecution:
    """Return ``execution`` cancelled, its suspended node's record closed.

    A ``running`` one (a checkpoint) is cancelled too, its attempt in flight closed
    ``cancelled``: the process still running it then loses its next save. Cancelling a
    cancelled execution returns it unchanged; a completed or failed one raises
    ``ResumeError``.
    """
    check_execution(execution, "cancel_execution")
    _, checked_clock, _, checked_observers = checked_call(None, clock, None, observers)
    if execution.status is ExecutionStatus.CANCELLED:
        return execution
    if execution.status in FINAL:
        raise ResumeError(
            f"execution {execution.id!r} is {execution.status.value}: it has ended, there "
            "is nothing to cancel"
        )
    check_transition(execution.status, ExecutionStatus.CANCELLED)
    now = check_clock(checked_clock)()
    runs = dict(execution.node_executions)
    if execution.status is ExecutionStatus.RUNNING:
        # a checkpoint: the attempt in flight is cancelled, and the pauses met so far
        keys = [running_node(execution), *(p.node_key for p in execution.other_pauses)]
    else:
        keys = [p.node_key for p in execution.pauses]
    for key in keys:
        if key is not None and runs.get(key):
            runs[key] = (*runs[key][:-1], close_paused(key, runs[key][-1], now))
    key = keys[0] if keys else None
    message = reason or "cancelled"
    cancelled = attrs.evolve(
        execution,
        status=ExecutionStatus.CANCELLED,
        node_executions=runs,
        other_pauses=(),
        resuming=(),
        lease_expires_at=None,
        error=ErrorInfo(
            code=ErrorCode.CANCELLED.value,
            type="Cancelled",
            module="prana",
            message=message,
            node_key=key,
        ),
        updated_at=now,
        completed_at=now,
    )
    if checked_observers:
        emit(
            checked_observers,
            Event(
                type=EventType.EXECUTION_CANCELLED,
                execution_id=execution.id,
                workflow_id=execution.workflow_id,
                at=now,
                node_key=key,
            ),
        )
    return cancelled
