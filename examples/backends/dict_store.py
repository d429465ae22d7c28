"""A store written from "Writing your own store or scheduler" alone: dicts behind one lock.

Every record is kept as the JSON text ``prana.dumps`` writes, so what a load returns is
what a real database would give back. ``tests`` in this folder run the conformance kit,
``scheduling.testing.StoreConformance``, over it.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING

import orjson

from prana import (
    ExecutionStatus,
    InvalidSettingsError,
    RecordError,
    Workflow,
    WorkflowExecution,
    dumps,
    dumps_workflow,
    loads,
    loads_workflow,
)
from scheduling import (
    ExecutionNotFound,
    StaleVersionError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling.abc import ExecutionSummary

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DictStore"]


class _Row:
    """One stored execution: its text, version, creation number and indexed columns."""

    def __init__(self, text: str, version: int, seq: int, execution: WorkflowExecution) -> None:
        self.text, self.version, self.seq = text, version, seq
        self.status = execution.status
        self.workflow_id = execution.workflow_id
        self.workflow_version = execution.workflow_version
        self.due_at = execution.due_at
        self.updated_at = execution.updated_at


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidSettingsError(f"limit={limit!r}: give a whole number of 1 or more")


class DictStore:
    """An ``ExecutionStore`` in process memory; everything is lost when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._next_seq = 0
        self._workflows: dict[tuple[str, int], str] = {}

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Compare-and-set: write only if the stored version is ``expected_version``."""
        if not isinstance(execution, WorkflowExecution):
            raise InvalidSettingsError(
                f"save(execution={execution!r}): pass a prana.WorkflowExecution"
            )
        text = dumps(execution)  # before taking the lock: a failure changes nothing
        with self._lock:
            row = self._rows.get(execution.id)
            if expected_version is None:
                if row is not None:
                    raise StaleVersionError(f"execution {execution.id!r} exists")
                self._next_seq += 1
                self._rows[execution.id] = _Row(text, 1, self._next_seq, execution)
                return 1
            if row is None or row.version != expected_version:
                raise StaleVersionError(f"execution {execution.id!r}: version moved on")
            self._rows[execution.id] = _Row(text, row.version + 1, row.seq, execution)
            return row.version + 1

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The last saved execution and its version."""
        with self._lock:
            row = self._rows.get(execution_id)
        if row is None:
            raise ExecutionNotFound(f"no execution {execution_id!r}")
        try:
            return loads(row.text), row.version
        except RecordError as exc:
            raise RecordError(f"execution {execution_id!r}: {exc}", exc.problems) from exc

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Executions due at or before ``now``, earliest first, ties in creation order."""
        _check_limit(limit)
        if not isinstance(now, datetime) or now.utcoffset() is None:
            raise InvalidSettingsError(f"now={now!r}: pass an aware datetime")
        with self._lock:
            due = [
                (row.due_at, row.seq, eid)
                for eid, row in self._rows.items()
                if row.due_at is not None and row.due_at <= now
            ]
        return [(eid, due_at) for due_at, _, eid in sorted(due)[:limit]]

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every execution with a due time, earliest first."""
        with self._lock:
            due = [(r.due_at, r.seq, eid) for eid, r in self._rows.items() if r.due_at]
        return [(eid, due_at) for due_at, _, eid in sorted(due)]

    def list(
        self,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        *,
        workflow_id: str | None = None,
        after: str | None = None,
    ) -> Sequence[ExecutionSummary]:
        """Summaries, newest first, filtered, starting below the ``after`` cursor."""
        _check_limit(limit)
        with self._lock:
            below = None
            if after is not None:
                if after not in self._rows:
                    raise ExecutionNotFound(f"after={after!r}: no such execution")
                below = self._rows[after].seq
            rows = sorted(self._rows.items(), key=lambda item: -item[1].seq)
        page = []
        for eid, row in rows:
            if below is not None and row.seq >= below:
                continue
            if status is not None and row.status != status:
                continue
            if workflow_id is not None and row.workflow_id != workflow_id:
                continue
            page.append(
                ExecutionSummary(
                    id=eid,
                    workflow_id=row.workflow_id,
                    workflow_version=row.workflow_version,
                    status=row.status,
                    version=row.version,
                    due_at=row.due_at,
                    updated_at=row.updated_at,
                )
            )
            if len(page) == limit:
                break
        return page

    def save_workflow(self, workflow: Workflow) -> None:
        """Keep a definition; the same one again is a no-op, a different one is refused."""
        text = dumps_workflow(workflow)
        key = (workflow.id, workflow.version)
        with self._lock:
            stored = self._workflows.setdefault(key, text)
        if stored != text and orjson.loads(stored) != orjson.loads(text):
            raise WorkflowConflictError(f"workflow {key}: a different definition is stored")

    def load_workflow(self, workflow_id: str, version: int) -> Workflow:
        """The stored definition."""
        with self._lock:
            text = self._workflows.get((workflow_id, version))
        if text is None:
            raise WorkflowNotFound(f"no workflow {workflow_id!r} version {version}")
        return loads_workflow(text)

    def latest_workflow_version(self, workflow_id: str) -> int | None:
        """The highest stored version of ``workflow_id``, or None."""
        with self._lock:
            versions = [v for wid, v in self._workflows if wid == workflow_id]
        return max(versions, default=None)

    def list_workflows(self) -> Sequence[tuple[str, int]]:
        """Every stored ``(workflow_id, version)``, sorted."""
        with self._lock:
            return sorted(self._workflows)

    def close(self) -> None:
        """Nothing to release."""
