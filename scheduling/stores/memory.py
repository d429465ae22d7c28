"""The reference store: everything in a dict, behind one lock.

It keeps the same promises as the SQL stores (compare-and-set on a version, definitions
immutable per id and version) and is what the conformance suite measures them against.
"""

from __future__ import annotations

import builtins
import threading
from itertools import count
from typing import TYPE_CHECKING, Any

from prana import ExecutionStatus, WorkflowExecution, dumps
from scheduling._errors import ExecutionNotFound
from scheduling.abc import ExecutionSummary
from scheduling.stores._base import BaseStore
from scheduling.stores._sql import (
    as_claimed,
    check_aware,
    check_claim,
    check_limit,
    check_list_args,
    check_save,
    check_status,
    check_tree_args,
    cursor_not_found,
    read_execution,
    stale,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

__all__ = ["MemoryStore"]


_Row = tuple[int, int, "WorkflowExecution | str", WorkflowExecution]
"""One stored execution: ``(version, seq, record, execution)``.

``record`` is what ``load`` hands back (the live execution, or its JSON text when
serializing); ``execution`` is the live one the columns (status, due time, ...) are read
from; ``seq`` is creation order. A plain tuple, because building one is most of a save.
"""


class MemoryStore(BaseStore):
    """Executions and definitions in process memory; lost when the process ends.

    By default it keeps the frozen ``WorkflowExecution`` it was given and hands the same
    object back from ``load``: the executor never changes an execution it was given, so
    sharing it is safe, and skipping JSON is what lets a runner resume tens of thousands
    of retries a second. ``serialize=True`` stores the JSON text instead, exactly as the
    SQL stores do, so a test also exercises ``prana.dumps``/``prana.loads`` and sees a
    copy that nothing outside the store can change.
    """

    def __init__(self, *, serialize: bool = False) -> None:
        super().__init__()
        self.serialize = serialize
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._due: dict[str, datetime] = {}
        self._workflows: dict[tuple[str, int], str] = {}
        self._schedules: dict[str, list[Any]] = {}  # id -> [definition, state, version]
        self._seq = count(1)
        # How many ids start with each prefix followed by ":" (what count_tree reads).
        self._under: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(serialize={self.serialize}) with {len(self._rows)} execution(s)"

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        """Store ``execution`` if ``expected_version`` is the stored one; return the new version."""
        if execution.__class__ is not WorkflowExecution or (
            expected_version is not None
            and (expected_version.__class__ is not int or expected_version < 1)
        ):
            check_save(execution, expected_version)
        record: WorkflowExecution | str = dumps(execution) if self.serialize else execution
        execution_id = execution.id
        due_at = execution.due_at
        rows = self._rows
        with self._lock:
            row = rows.get(execution_id)
            if expected_version is None:
                if row is not None:
                    raise stale(execution_id, None, row[0])
                rows[execution_id] = (1, next(self._seq), record, execution)
                if ":" in execution_id:
                    self._count_prefixes(execution_id)
            else:
                if row is None or row[0] != expected_version:
                    raise stale(execution_id, expected_version, None if row is None else row[0])
                rows[execution_id] = (expected_version + 1, row[1], record, execution)
            if due_at is None:
                self._due.pop(execution_id, None)
            else:
                self._due[execution_id] = due_at
        return 1 if expected_version is None else expected_version + 1

    def claim(
        self,
        execution_id: str,
        expected_version: int,
        lease_expires_at: datetime,
        claimed_at: datetime,
    ) -> int:
        """Mark the stored execution running until ``lease_expires_at``, its record unchanged.

        ``scheduling.abc.ClaimingStore``: a compare-and-set on the version, like ``save``;
        ``load`` then reads the record as the SQL stores do (``as_claimed``).
        """
        check_claim(execution_id, expected_version, lease_expires_at, claimed_at)
        with self._lock:
            row = self._rows.get(execution_id)
            if row is None or row[0] != expected_version:
                raise stale(execution_id, expected_version, None if row is None else row[0])
            version, seq, record, execution = row
            execution = as_claimed(execution, lease_expires_at, claimed_at)
            if not isinstance(record, str):
                record = execution  # serialized: the text stays, ``load`` reads it as claimed
            self._rows[execution_id] = (version + 1, seq, record, execution)
            self._due[execution_id] = lease_expires_at
        return version + 1

    def _count_prefixes(self, execution_id: str) -> None:
        under = self._under
        at = execution_id.find(":")
        while at >= 0:
            prefix = execution_id[:at]
            under[prefix] = under.get(prefix, 0) + 1
            at = execution_id.find(":", at + 1)

    def count_tree(self, root_id: str, most: int) -> int:
        """Executions with id ``root_id`` or starting ``root_id + ":"``, up to ``most``."""
        most = check_tree_args(root_id, most)
        with self._lock:
            found = (root_id in self._rows) + self._under.get(root_id, 0)
        return min(found, most)

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        """The execution and its version; ``ExecutionNotFound`` if there is none."""
        row = self._rows.get(execution_id)  # one dict read: atomic, no lock needed
        if row is None:
            raise ExecutionNotFound(f"no execution {execution_id!r} is stored")
        version, _, record, execution = row
        if isinstance(record, str):
            stored = read_execution(execution_id, record)
            if execution.status is not stored.status:  # claimed (``claim``)
                stored = as_claimed(stored, execution.lease_expires_at, execution.updated_at)
            return stored, version
        return record, version

    def find_due(self, now: datetime, limit: int = 100) -> Sequence[tuple[str, datetime]]:
        """Suspended executions due at or before ``now``, earliest first (ties: oldest first)."""
        check_aware(now, "find_due(now)")
        check_limit(limit)
        with self._lock:
            due = [(at, self._rows[eid][1], eid) for eid, at in self._due.items() if at <= now]
        due.sort()
        return [(eid, at) for at, _, eid in due[:limit]]

    def alarms(self) -> Sequence[tuple[str, datetime]]:
        """Every suspended execution with a due time, earliest first."""
        with self._lock:
            due = [(at, self._rows[eid][1], eid) for eid, at in self._due.items()]
        due.sort()
        return [(eid, at) for at, _, eid in due]

    def list(
        self,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        *,
        workflow_id: str | None = None,
        after: str | None = None,
    ) -> Sequence[ExecutionSummary]:
        """Executions, most recently created first, filtered and paged (see ``ExecutionStore``)."""
        wanted = check_status(status)
        check_limit(limit)
        check_list_args(workflow_id, after)
        found: builtins.list[tuple[str, int, WorkflowExecution]] = []
        with self._lock:
            rows = self._rows
            below = None
            if after is not None:
                cursor = rows.get(after)
                if cursor is None:
                    raise cursor_not_found(after)
                below = cursor[1]
            # A dict keeps insertion order and an update keeps a key's place: newest is last.
            for eid, (version, seq, _, execution) in reversed(rows.items()):
                if below is not None and seq >= below:
                    continue
                if (wanted is None or execution.status is wanted) and (
                    workflow_id is None or execution.workflow_id == workflow_id
                ):
                    found.append((eid, version, execution))
                    if len(found) == limit:
                        break
        return [
            ExecutionSummary(
                id=eid,
                workflow_id=execution.workflow_id,
                workflow_version=execution.workflow_version,
                status=execution.status,
                version=version,
                due_at=execution.due_at,
                updated_at=execution.updated_at,
            )
            for eid, version, execution in found
        ]

    def _insert_workflow(self, key: tuple[str, int], text: str) -> str | None:
        with self._lock:
            stored = self._workflows.get(key)
            if stored is None:
                self._workflows[key] = text
        return stored

    def _select_workflow(self, key: tuple[str, int]) -> str | None:
        with self._lock:
            return self._workflows.get(key)

    def list_workflows(self) -> builtins.list[tuple[str, int]]:
        """Every stored definition's ``(workflow_id, version)``, sorted."""
        with self._lock:
            return sorted(self._workflows)

    def latest_workflow_version(self, workflow_id: str) -> int | None:
        """The highest stored version of ``workflow_id``, or None."""
        with self._lock:
            versions = [v for (wid, v) in self._workflows if wid == workflow_id]
        return max(versions, default=None)

    def close(self) -> None:
        """Nothing to release; the data stays readable until the store is dropped."""

    # -- schedules (scheduling._schedules: definitions and state as JSON text) ----------

    def schedule_insert(self, schedule_id: str, definition: str, state: str) -> bool:
        """Store a new schedule; ``False`` if one has this id."""
        with self._lock:
            if schedule_id in self._schedules:
                return False
            self._schedules[schedule_id] = [definition, state, 1]
            return True

    def schedule_define(self, schedule_id: str, definition: str) -> bool:
        """Replace a schedule's definition; ``False`` if there is none."""
        with self._lock:
            row = self._schedules.get(schedule_id)
            if row is None:
                return False
            row[0] = definition
            return True

    def schedule_row(self, schedule_id: str) -> tuple[str, str, int] | None:
        """A schedule's ``(definition, state, state version)``, or ``None``."""
        with self._lock:
            row = self._schedules.get(schedule_id)
            return None if row is None else (row[0], row[1], row[2])

    def schedule_rows(self) -> builtins.list[tuple[str, str, str, int]]:
        """Every schedule's ``(id, definition, state, state version)``, by id."""
        with self._lock:
            return [(k, r[0], r[1], r[2]) for k, r in sorted(self._schedules.items())]

    def schedule_advance(self, schedule_id: str, state: str, expected_version: int) -> bool:
        """Replace a schedule's state if its version is still ``expected_version``."""
        with self._lock:
            row = self._schedules.get(schedule_id)
            if row is None or row[2] != expected_version:
                return False
            row[1], row[2] = state, expected_version + 1
            return True

    def schedule_delete(self, schedule_id: str) -> bool:
        """Forget a schedule (its executions stay); ``False`` if there was none."""
        with self._lock:
            return self._schedules.pop(schedule_id, None) is not None
