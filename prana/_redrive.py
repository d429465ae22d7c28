"""Redrive: take a failed execution up again from its failed node, or from a node before it.

NoETL parks a job whose attempts ran out as ``dead``; prana's dead letters are its failed
executions, and ``redrive_execution`` turns one back into a suspended execution that waits,
due now, to run a node again. Resuming it (``resume_workflow``, or the shell's alarm) runs
that node with its input rebuilt fresh from the execution's records, then the rest of the
workflow as usual. Nothing is forgotten: every earlier attempt stays in the ledger, the
attempt the redrive starts is marked ``redrive=True``, and observers see an
``execution_redriven`` event.

Two ways to redrive:

- from the failed node (the default): its failed run continues in place. Without
  ``reset_attempts`` the next attempt takes the next number and the policy's count and
  ``retry_timeout`` carry on (usually: this one attempt); with it, numbering restarts at 1
  and the node's policy, budget included, applies afresh from the redrive.
- from a node that leads to the failed node (``node=``): that node runs again as a new run
  (a new ``run_index``, so a new idempotency key), and what follows it runs again as its
  outputs arrive; the failed run stays in the history.

Pure, like the rest of the core: the execution given is never changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import attrs

from prana._engine import Clock
from prana._entry import check_clock, check_execution, check_same_workflow, checked_call
from prana._errors import ResumeError
from prana._events import Event, EventType, Observer, emit
from prana._model import (
    Activation,
    ExecutionStatus,
    NodeExecution,
    NodeStatus,
    RetryData,
    Suspend,
    Workflow,
    WorkflowExecution,
)
from prana._registry import Registry
from prana._resolve import resolve
from prana._state import check_node_transition, check_transition

__all__ = ["redrive_execution"]

_REFUSALS = {
    ExecutionStatus.COMPLETED: "there is nothing to redrive",
    ExecutionStatus.SUSPENDED: (
        "it resumes by itself when due (or with deliver for a webhook); "
        "only a failed execution can be redriven"
    ),
    ExecutionStatus.PENDING: "it has not run yet; only a failed execution can be redriven",
    ExecutionStatus.RUNNING: "only a failed execution can be redriven",
    ExecutionStatus.CANCELLED: (
        "it was cancelled on purpose, and a redrive would undo that decision; start the "
        "workflow again for a fresh execution"
    ),
}


def redrive_execution(
    execution: WorkflowExecution,
    *,
    workflow: Workflow,
    node: str | None = None,
    reset_attempts: bool = False,
    registry: Registry | None = None,
    clock: Clock | None = None,
    observers: Sequence[Observer] | None = None,
) -> WorkflowExecution:
    """A failed execution made resumable again: suspended, due now, at ``node``.

    ``node`` defaults to the node whose failure failed the execution; a named node must
    have run and lead to that node. ``reset_attempts`` restarts the failed node's attempt
    count and retry budget (see the module docstring). The result is a ``suspended``
    execution with a retry suspension due at once; resume it with ``resume_workflow``.
    Raises ``ResumeError`` (with the reason) for an execution that did not fail, a
    sub-workflow whose parent waits on it, or a node it cannot start from.
    """
    check_execution(execution, "redrive_execution")
    checked_registry, checked_clock, _, checked_observers = checked_call(
        registry, clock, None, observers
    )
    if not isinstance(reset_attempts, bool):
        raise ResumeError(
            f"redrive_execution(reset_attempts={reset_attempts!r}): use True or False"
        )
    refusal = _REFUSALS.get(execution.status)
    if refusal is not None:
        raise ResumeError(
            f"execution {execution.id!r} is {execution.status.value}: cannot redrive it; {refusal}"
        )
    check_same_workflow(execution, workflow, "ran")
    parent = execution.parent
    if parent is not None and parent.mode != "fire_and_forget":
        raise ResumeError(
            f"execution {execution.id!r} is a sub-workflow of {parent.execution_id!r}, which "
            "has already been told it failed; redrive the parent instead (its node starts "
            "a new child)"
        )
    failed = execution.error.node_key if execution.error is not None else None
    if failed is None or failed not in execution.node_executions:
        raise ResumeError(
            f"execution {execution.id!r} failed without a failed node run "
            f"({_describe_error(execution)}); there is no node to redrive"
        )
    start = failed if node is None else node
    nodes = {n.key: n for n in workflow.nodes}
    if start not in nodes:
        raise ResumeError(
            f"redrive_execution(node={start!r}): no node {start!r} in workflow "
            f"{workflow.id!r}; its nodes are {', '.join(sorted(nodes))}"
        )
    runs = execution.node_executions.get(start)
    if not runs:
        raise ResumeError(
            f"redrive_execution(node={start!r}): node {start!r} never ran in execution "
            f"{execution.id!r}; start from the failed node {failed!r} or a node that ran "
            "before it"
        )
    now = check_clock(checked_clock)()
    check_transition(execution.status, ExecutionStatus.SUSPENDED)
    node_executions = dict(execution.node_executions)
    pending = list(execution.pending)
    next_index = execution.next_index
    if start == failed and runs[-1].status is NodeStatus.FAILED:
        last = runs[-1]
        check_node_transition(start, last.status, NodeStatus.SUSPENDED)  # the operator's edge
        number = 1 if reset_attempts or not last.attempts else last.attempts[-1].number + 1
        node_executions[start] = (
            *runs[:-1],
            attrs.evolve(last, status=NodeStatus.SUSPENDED, completed_at=None),
        )
        if not any(a.node_key == start for a in pending):
            # Written before activations outlived a failure: rebuild it from the records.
            pending.insert(0, _activation(workflow, execution, start, last.execution_index))
        run_index = last.run_index
    else:
        if start == failed:
            raise ResumeError(
                f"node {start!r} has no failed run to redrive ({_describe_error(execution)}); "
                "name a node that leads to it"
            )
        if failed not in _downstream(workflow, start):
            raise ResumeError(
                f"redrive_execution(node={start!r}): node {start!r} does not lead to the "
                f"failed node {failed!r}, so running it again would not run {failed!r}; "
                f"start from {failed!r} or a node before it"
            )
        number = 1
        run_index = len(runs)
        rerun = _downstream(workflow, start) | {start}
        pending = [a for a in (_without(a, rerun) for a in pending) if a is not None]
        pending.insert(0, _activation(workflow, execution, start, None))
        node_executions[start] = (
            *runs,
            NodeExecution(
                node_key=start,
                status=NodeStatus.SUSPENDED,
                execution_index=next_index,
                run_index=run_index,
                started_at=now,
            ),
        )
        next_index += 1
    error = execution.error
    assert error is not None  # a failed node was found in it above
    data = RetryData(
        retry_delay_ms=0,
        attempt_number=number,
        max_attempts=_max_attempts(workflow, start, number, checked_registry),
        original_error=error,
        resume_at=now,
        redrive=True,
    )
    redriven = attrs.evolve(
        execution,
        status=ExecutionStatus.SUSPENDED,
        node_executions=node_executions,
        pending=tuple(pending),
        next_index=next_index,
        suspended_node=start,
        suspension=Suspend("retry", data),
        error=None,
        updated_at=now,
        completed_at=None,
    )
    if checked_observers:
        emit(
            checked_observers,
            Event(
                type=EventType.EXECUTION_REDRIVEN,
                execution_id=execution.id,
                workflow_id=execution.workflow_id,
                at=now,
                node_key=start,
                run_index=run_index,
                attempt=number,
                max_attempts=data.max_attempts,
                error=execution.error,
            ),
        )
    return redriven


def _describe_error(execution: WorkflowExecution) -> str:
    error = execution.error
    return "no error recorded" if error is None else f"{error.code}: {error.message}"


def _max_attempts(workflow: Workflow, key: str, number: int, registry: Registry) -> int | None:
    """What ``RetryData.max_attempts`` says for a redrive: the node's largest allowance."""
    node = next(n for n in workflow.nodes if n.key == key)
    spec = registry.get(node.type)
    policies = [p for p in resolve(node, workflow, spec.retry if spec else None) if p.enabled]
    if any(p.max_attempts is None for p in policies):
        return None
    return max([number, *(p.max_attempts or 1 for p in policies)])


def _downstream(workflow: Workflow, start: str) -> set[str]:
    """Every node a path of connections leads to from ``start`` (``start`` only in a loop)."""
    outgoing: dict[str, list[str]] = {}
    for c in workflow.connections:
        outgoing.setdefault(c.from_node, []).append(c.to_node)
    seen: set[str] = set()
    queue = deque(outgoing.get(start, ()))
    while queue:
        key = queue.popleft()
        if key not in seen:
            seen.add(key)
            queue.extend(outgoing.get(key, ()))
    return seen


def _without(activation: Activation, rerun: set[str]) -> Activation | None:
    """``activation`` without the deliveries the rerun will make again; ``None`` if empty."""
    kept = {port: src for port, src in activation.sources.items() if src[0] not in rerun}
    if len(kept) == len(activation.sources):
        return activation
    return attrs.evolve(activation, sources=kept) if kept else None


def _activation(
    workflow: Workflow, execution: WorkflowExecution, key: str, before: int | None
) -> Activation:
    """The activation node ``key`` ran (or would run) with, rebuilt from the records.

    Per input port, the latest completed run of a connected source on the connection's
    port (started before ``before``, when given) is the delivery; a trigger has none.
    """
    sources: dict[str, tuple[str, str, int]] = {}
    for c in workflow.connections:
        if c.to_node != key:
            continue
        for record in reversed(execution.node_executions.get(c.from_node, ())):
            index = record.execution_index
            if before is not None and index >= before:
                continue
            if record.status is NodeStatus.COMPLETED and record.output_port == c.from_port:
                best = sources.get(c.to_port)
                if best is None or best[2] < index:
                    sources[c.to_port] = (c.from_node, c.from_port, index)
                break
    seq = max((src[2] for src in sources.values()), default=-1)
    return Activation(node_key=key, seq=seq, sources=sources)
