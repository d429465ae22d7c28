"""Small readings of records that the runner's steps share (kept out of ``_runner.py``).

A parent's child id, a child's end as a parent's resume data, the tracer among the observers;
and a listed row the store could not read, as ``prana list --json`` and the web list show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prana import ExecutionStatus
from scheduling._errors import UnreadableRowsError
from scheduling.abc import TracePropagator, UnreadableRow

if TYPE_CHECKING:
    from prana import Outcome, WorkflowExecution
    from scheduling.abc import ExecutionStore, ExecutionSummary

__all__ = [
    "UNREADABLE",
    "child_execution_id",
    "error_dict",
    "exception_dict",
    "execution_of",
    "first_tracer",
    "suspended_without_due_time",
    "unreadable_row",
]

UNREADABLE = "unreadable"
"""The ``status`` of a listed row the store could not read; its ``problem`` says why."""


def unreadable_row(row: UnreadableRow, **more: Any) -> dict[str, Any]:
    """A listed row the store could not read (a hand-edited status): its id, status
    ``unreadable`` and ``problem`` (``"field: message"``); what could not be read is
    ``None``. ``more`` are the caller's own columns, also ``None`` (``failure``: the CLI's)."""
    return {
        "id": row.id,
        "workflow_id": None,
        "workflow_version": None,
        "status": UNREADABLE,
        "record_version": None,
        "due_at": None,
        "updated_at": None,
        **more,
        "problem": row.problem,
    }


def child_execution_id(parent: WorkflowExecution) -> str | None:
    """The id of the child a parent suspended on a sub-workflow runs, or ``None``.

    It is derived from the parent's id, node key, run index and attempt, so starting the
    child twice (a fire delivered twice, a restart) collides in the store instead of
    running a second child, and a retried sub-workflow node gets a fresh child. The attempt
    is its place in the run's ledger, which is its number unless a redrive reset the
    numbering: a redriven node gets a fresh child too.
    """
    suspension = parent.suspension
    key = parent.suspended_node
    if suspension is None or suspension.kind != "sub_workflow" or key is None:
        return None
    run = parent.node(key)
    if run is None:
        return None
    attempt = len(run.attempts) or 1
    return f"{parent.id}:{key}:{run.run_index}:{attempt}"


def execution_of(outcome: Outcome) -> WorkflowExecution:
    """The execution an executor outcome carries (always set on what the executor returns)."""
    execution = outcome.execution
    assert execution is not None, "the executor returns outcomes with the execution filled in"
    return execution


def error_dict(execution: WorkflowExecution) -> dict[str, Any]:
    """A child's failure as the JSON-native ``error`` of a sub-workflow resume."""
    error = execution.error
    if error is None:
        return {"code": execution.status.value, "message": f"child {execution.status.value}"}
    return {
        "code": error.code,
        "type": error.type,
        "module": error.module,
        "message": error.message,
        "details": error.details,
        "node_key": error.node_key,
        "execution_id": execution.id,
    }


def exception_dict(exc: BaseException, code: str) -> dict[str, Any]:
    """An exception the runner caught, as the JSON-native ``error`` of a sub-workflow resume."""
    return {
        "code": code,
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc),
    }


def first_tracer(observers: Sequence[object]) -> TracePropagator | None:
    """The first observer that is also a ``TracePropagator``, or ``None``."""
    for observer in observers:
        if isinstance(observer, TracePropagator):
            return observer
    return None


def suspended_without_due_time(store: ExecutionStore) -> list[str]:
    """The ids of the suspended rows without a due time (sub-workflow parents among them), and
    of the rows ``list`` could not read: their records may still be, and loading one that
    is not says what is wrong (a row edited by hand must not stop a runner opening)."""
    try:
        rows: Sequence[ExecutionSummary | UnreadableRow] = store.list(
            ExecutionStatus.SUSPENDED, limit=1_000_000
        )
    except UnreadableRowsError as exc:
        rows = exc.rows
    return [row.id for row in rows if isinstance(row, UnreadableRow) or row.due_at is None]
