"""The JSON that ``prana list --json`` and ``prana show --json`` print: stable field names.

Field names are the records' own attribute names (``WorkflowExecution``, ``NodeExecution``,
``AttemptRecord``, ``ErrorInfo`` and the suspension data records), so the Python API
reference documents them too. Datetimes are ISO 8601 text with an offset, statuses and other
enums their string values, absent values ``null``. Fields are only ever added.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from scheduling._records import unreadable_row

if TYPE_CHECKING:
    from prana import WorkflowExecution
    from scheduling._listing import Failure
    from scheduling.abc import ExecutionSummary, UnreadableRow

LIST_FORMAT = 1
"""Bumped only if a field changes meaning or goes away (never so far)."""


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: records as objects by attribute name, times as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return {a.name: plain(getattr(value, a.name)) for a in attrs.fields(type(value))}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def summary_json(row: ExecutionSummary, failure: Failure | None = None) -> dict[str, Any]:
    """One ``prana list --json`` row; a failed execution's row carries its ``failure``
    (``problem`` is set only on a row the store could not read, see ``unreadable_json``)."""
    return {
        "id": row.id,
        "workflow_id": row.workflow_id,
        "workflow_version": row.workflow_version,
        "status": row.status.value,
        "record_version": row.version,
        "due_at": plain(row.due_at),
        "updated_at": plain(row.updated_at),
        "failure": plain(failure),
        "problem": None,
    }


def unreadable_json(row: UnreadableRow) -> dict[str, Any]:
    """A ``prana list --json`` row the store could not read: its id, status ``unreadable``,
    ``problem`` (``"field: message"``); the fields it could not read are ``null``."""
    return unreadable_row(row, failure=None)


def execution_json(execution: WorkflowExecution, record_version: int) -> dict[str, Any]:
    """The ``prana show --json`` object: the whole execution with every attempt."""
    body: dict[str, Any] = plain(execution)
    del body["pending"], body["next_index"]  # the executor's bookkeeping, not the operator's
    body["record_version"] = record_version
    body["due_at"] = plain(execution.due_at)
    body["node_executions"] = {
        key: [plain(run) for run in runs] for key, runs in execution.node_executions.items()
    }
    suspension = execution.suspension
    body["suspension"] = (
        None if suspension is None else {"kind": suspension.kind, "data": plain(suspension.data)}
    )
    return body
