"""Executions as JSON-native views: what the API returns, the SSE stream sends, pages show.

A view is read-only data computed from a stored execution (and its definition, for the
retry policies' ``schedule()`` preview). It never includes a webhook token: the stored
record holds only a digest, and the view leaves even that out.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from prana import AttemptOutcome, ErrorInfo, ExecutionStatus
from scheduling._console import claimed_resume
from scheduling._runner import FINAL_STATUSES

if TYPE_CHECKING:
    from prana import NodeExecution, Registry, Workflow, WorkflowExecution
    from scheduling._listing import Failure, Waiting
    from scheduling.abc import ExecutionSummary

__all__ = ["FINAL", "execution_view", "summary_view"]

FINAL = frozenset(s.value for s in FINAL_STATUSES)
"""The statuses that end a run (``prana``'s transition tables' ``FINAL``), as values."""
SCHEDULE_PREVIEW_ROWS = 10
"""At most this many retries of a policy's schedule are shown."""


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _ms(delta_seconds: float) -> int:
    return round(delta_seconds * 1000)


def _error(error: ErrorInfo | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "code": error.code,
        "type": error.type,
        "message": error.message,
        "details": error.details,
        "node_key": error.node_key,
        "traceback": error.traceback,
    }


def summary_view(
    row: ExecutionSummary, failure: Failure | None = None, waiting: Waiting | None = None
) -> dict[str, Any]:
    """One row of the list: id, workflow, status, the record's version (``record_version``,
    as ``prana list --json`` names it), times, and for a failed row its ``failure`` (node,
    error code and type, message, attempts), for a suspended one its ``waiting`` (kind,
    node, due time: ``None`` until a delivery)."""
    return {
        "id": row.id,
        "workflow_id": row.workflow_id,
        "workflow_version": row.workflow_version,
        "status": row.status.value,
        "record_version": row.version,
        "due_at": _iso(row.due_at),
        "updated_at": _iso(row.updated_at),
        "failure": None
        if failure is None
        else {
            "node_key": failure.node,
            "code": failure.code,
            "type": failure.type,
            "message": failure.message,
            "attempts": failure.attempts,
            "failed_at": _iso(failure.failed_at),
        },
        "waiting": None
        if waiting is None
        else {"kind": waiting.kind, "node_key": waiting.node, "due_at": _iso(waiting.due_at)},
        "problem": None,
    }


def _schedule(run: NodeExecution, workflow: Workflow | None, registry: Registry) -> Any:
    """The node's retry policies with their ``schedule()`` preview, from the definition."""
    if workflow is None:
        return []
    from prana.shell import resolve_policies, schedule_head

    node = next((n for n in workflow.nodes if n.key == run.node_key), None)
    if node is None:
        return []
    spec = registry.get(node.type)
    policies = resolve_policies(node, workflow, spec.retry if spec is not None else None)
    out: list[dict[str, Any]] = []
    for policy in policies:
        if not policy.enabled:
            out.append({"policy": "retry disabled", "rows": []})
            continue
        rows = schedule_head(policy, SCHEDULE_PREVIEW_ROWS)
        out.append(
            {
                "policy": policy.describe(),
                "rows": [
                    {
                        "retry": r.retry,
                        "min_delay_s": r.min_delay,
                        "typical_delay_s": r.typical_delay,
                        "max_delay_s": r.max_delay,
                        "cumulative_typical_s": r.cumulative_typical,
                    }
                    for r in rows
                ],
            }
        )
    return out


def _attempts(run: NodeExecution) -> list[dict[str, Any]]:
    """Every attempt with its chosen delay, due time and lateness (start minus due); a
    redriven attempt has ``redriven_at`` (the operator's time, its ``due_at``), no lateness.

    What started each one: ``retry`` (the policy), ``redrive`` (an operator), or
    ``recovered`` (the same attempt run again after its process died: the one before it
    has its number and ended ``interrupted``).
    """
    out = []
    previous = None
    for attempt in run.attempts:
        recovered = (
            previous is not None
            and previous.outcome is AttemptOutcome.INTERRUPTED
            and previous.number == attempt.number
        )
        previous = attempt
        late = None  # a redriven attempt was not scheduled: its due time is the redrive's
        if (
            attempt.due_at is not None
            and not attempt.redrive
            and attempt.outcome is not AttemptOutcome.RUNNING
        ):
            late = _ms((attempt.started_at - attempt.due_at).total_seconds())
        duration = None
        if attempt.ended_at is not None:
            duration = _ms((attempt.ended_at - attempt.started_at).total_seconds())
        out.append(
            {
                "number": attempt.number,
                "retry": attempt.number > 1 and not attempt.redrive and not recovered,
                "redrive": attempt.redrive,
                "recovered": recovered,
                "outcome": attempt.outcome.value,
                "started_at": _iso(attempt.started_at),
                "ended_at": _iso(attempt.ended_at),
                "duration_ms": duration,
                "error": _error(attempt.error),
                "retry_delay_ms": attempt.retry_delay_ms,
                "due_at": _iso(attempt.due_at),
                "lateness_ms": late,
                "redriven_at": _iso(attempt.due_at) if attempt.redrive else None,
            }
        )
    return out


def execution_view(
    execution: WorkflowExecution,
    version: int,
    workflow: Workflow | None,
    registry: Registry,
) -> dict[str, Any]:
    """The whole execution as JSON-native data: header, waiting state, node runs, attempts.

    ``due_at`` is the execution's alarm, as the list's row gives it: a wait's due time, or a
    ``running`` execution's lease end (a light claim's too).
    """
    waiting = None
    suspension = execution.suspension
    if execution.status is ExecutionStatus.SUSPENDED and suspension is not None:
        waiting = {
            "kind": suspension.kind,
            "node_key": execution.suspended_node,
            "due_at": _iso(execution.due_at),
        }
    previews: dict[str, Any] = {}  # per node key: a node's runs share its policies

    def preview(run: NodeExecution) -> Any:
        found = previews.get(run.node_key)
        if found is None:
            found = previews[run.node_key] = _schedule(run, workflow, registry)
        return found

    nodes = [
        {
            "node_key": run.node_key,
            "run_index": run.run_index,
            "execution_index": run.execution_index,
            "status": run.status.value,
            "output_port": run.output_port,
            "started_at": _iso(run.started_at),
            "completed_at": _iso(run.completed_at),
            "error": _error(run.error),
            "params": run.params,
            "output": run.output,
            "attempts": _attempts(run),
            "retry_policies": preview(run),
        }
        for run in execution.ordered_node_executions()
    ]
    return {
        "id": execution.id,
        "workflow_id": execution.workflow_id,
        "workflow_version": execution.workflow_version,
        "workflow_name": workflow.name if workflow is not None else "",
        "status": execution.status.value,
        "record_version": version,
        "started_at": _iso(execution.started_at),
        "updated_at": _iso(execution.updated_at),
        "completed_at": _iso(execution.completed_at),
        "due_at": _iso(execution.due_at),
        "waiting": waiting,
        "input": execution.input,
        "resuming": claimed_resume(execution),
        "lease_expires_at": _iso(execution.lease_expires_at),
        "error": _error(execution.error),
        "output": execution.output,
        "parent": None
        if execution.parent is None
        else {"execution_id": execution.parent.execution_id, "node_key": execution.parent.node_key},
        "nodes": nodes,
        "redrives": sum(a["redrive"] for n in nodes for a in n["attempts"]),
        "interruptions": sum(
            a["outcome"] == AttemptOutcome.INTERRUPTED.value for n in nodes for a in n["attempts"]
        ),
        "trace_context": dict(execution.trace_context) if execution.trace_context else None,
    }
