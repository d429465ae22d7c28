"""The reference store: everything in a dict, behind one lock.

It keeps the same promises as the SQL stores (compare-and-set on a version, definitions
immutable per id and version) and is what the conformance suite measures them against.
"""

from __future__ import annotations

import threading
from itertools import count
from typing import TYPE_CHECKING, Any

from prana import ExecutionStatus, Workflow, WorkflowExecution, dumps
from scheduling._errors import ExecutionNotFound, WorkflowConflictError, WorkflowNotFound
from scheduling.abc import ExecutionSummary
from scheduling.stores._sql import (
    check_aware,
    check_limit,
    check_save,
    check_status,
    conflict_message,
    dump_workflow,
    not_found_message,
    read_execution,
    read_workflow,
    same_definition,
    stale,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

__all__ = ["MemoryStore"]


class _Row:
    """One stored execution: the record (live or as JSON text) and its columns."""

    __slots__ = ("due_at", "record", "seq", "status", "updated_at", "version", "workflow")

    def __init__(
        self,
        seq: int,
        version: int,
        execution: WorkflowExecution,
        record: WorkflowExecution | str,
    ) -> None:
        self.seq = seq
        self.version = version
        self.workflow = (execution.workflow_id, execution.workflow_version)
        self.status = execution.status
        self.due_at = execution.due_at
        self.updated_at = execution.updated_at
        self.record: Any = record


class MemoryStore:
    """Executions and definitions in process memory; lost when the process ends.

    By default it keeps the frozen ``WorkflowExecution`` it was given and hands the same
    object back from ``load``: the executor never changes an execution it was given, so
    sharing it is safe, and skipping JSON is what lets a runner resume tens of thousands
    of retries a second. ``serialize=True`` stores the JSON text instead, exactly as the
    SQL stores do, so a test also exercises ``prana.dumps``/``prana.loads`` and sees a
    copy that nothing outside the store can change.
    """

    def __init__(self, *, serialize: bool = False) -> None:
        self.serialize = serialize
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._due: dict[str, datetime] = {}
        self._workflows: dict[tuple[str, int], str] = {}
        self._workflow_cache: dict[tuple[str, int], Workflow] = {}
        self._seq = count(1)

    def __repr__(self) -> str:
        return f"MemoryStore(serialize={self.serialize}) with {len(self._rows)} execution(s)"

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Store ``execution`` if ``expected_version`` is the stored one; return the new version."""
        check_save(execution, expected_version)
        if self.serialize:
            record: WorkflowExecution | str = dumps(execution)
        else:
            record = execution
        execution_id = execution.id
        due_at = execution.due_at
        with self._lock:
            row = self._rows.get(execution_id)
            if expected_version is None:
                if row is not None:
                    raise stale(execution_id, None, row.version)
                seq = next(self._seq)
                version = 1
            else:
                if row is None or row.version != expected_version:
                    raise stale(
                        execution_id, expected_version, None if row is None else row.version
                    )
                seq = row.seq
                version = expected_version + 1
            self._rows[execution_id] = _Row(seq, version, execution, record)
            if due_at is None:
                self._due.pop(execution_id, None)
            else:
                self._due[execution_id] = due_at
        return version

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The execution and its version; ``ExecutionNotFound`` if there is none."""
        with self._lock:
            row = self._rows.get(execution_id)
            if row is None:
                raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
            record, version = row.record, row.version
        if isinstance(record, WorkflowExecution):
            return record, version
        return read_execution(execution_id, record), version

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Suspended executions due at or before ``now``, earliest first (ties: oldest first)."""
        check_aware(now, "find_due(now)")
        check_limit(limit)
        with self._lock:
            due = [(at, self._rows[eid].seq, eid) for eid, at in self._due.items() if at <= now]
        due.sort()
        return [(eid, at) for at, _, eid in due[:limit]]

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every suspended execution with a due time, earliest first."""
        with self._lock:
            due = [(at, self._rows[eid].seq, eid) for eid, at in self._due.items()]
        due.sort()
        return [(eid, at) for at, _, eid in due]

    def list(
        self, status: ExecutionStatus | None = None, limit: int = 100
    ) -> Sequence[ExecutionSummary]:
        """Executions, most recently created first, optionally only those with ``status``."""
        wanted = check_status(status)
        check_limit(limit)
        with self._lock:
            rows = [
                (eid, row)
                for eid, row in self._rows.items()
                if wanted is None or row.status is wanted
            ]
        rows.sort(key=lambda item: item[1].seq, reverse=True)
        return [
            ExecutionSummary(
                id=eid,
                workflow_id=row.workflow[0],
                workflow_version=row.workflow[1],
                status=row.status,
                version=row.version,
                due_at=row.due_at,
                updated_at=row.updated_at,
            )
            for eid, row in rows[:limit]
        ]

    def save_workflow(self, workflow: Workflow) -> None:
        """Keep a definition; the same one again is a no-op, a different one is refused."""
        text = dump_workflow(workflow)
        key = (workflow.id, workflow.version)
        with self._lock:
            stored = self._workflows.get(key)
            if stored is None:
                self._workflows[key] = text
                return
        if not same_definition(stored, text):
            raise WorkflowConflictError(conflict_message(*key))

    def load_workflow(self, workflow_id: str, version: int) -> Workflow:
        """The stored definition; ``WorkflowNotFound`` if there is none."""
        key = (workflow_id, version)
        cached = self._workflow_cache.get(key)
        if cached is not None:
            return cached
        with self._lock:
            text = self._workflows.get(key)
        if text is None:
            raise WorkflowNotFound(not_found_message(workflow_id, version))
        workflow = read_workflow(workflow_id, version, text)
        self._workflow_cache[key] = workflow
        return workflow

    def close(self) -> None:
        """Nothing to release; the data stays readable until the store is dropped."""
