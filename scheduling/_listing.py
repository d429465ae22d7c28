"""One page of executions with what an operator needs beside each row: why a failed one
failed (node, error code, attempts) and what a suspended one waits on (kind, node, due
time). ``prana list`` and the web list (HTML and JSON) both read it through ``read_page``."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from prana import ExecutionStatus, RecordError
from scheduling._errors import ExecutionNotFound, UnreadableRowsError
from scheduling.abc import UnreadableRow

if TYPE_CHECKING:
    from prana import WorkflowExecution
    from scheduling.abc import ExecutionStore, ExecutionSummary

__all__ = ["MAX_SCANNED", "Failure", "Page", "Waiting", "failure_of", "read_page", "waiting_of"]

MAX_SCANNED = 1_000
"""The most failed rows one page filtered by error code reads (each is loaded to read its
code); past it the page ends early, with a cursor to go on from."""


@attrs.frozen
class Failure:
    """What an operator needs of a dead letter: where it failed, why, after how many tries."""

    node: str | None
    code: str | None
    type: str | None
    message: str | None
    attempts: int
    failed_at: datetime | None


@attrs.frozen
class Waiting:
    """What a suspended execution waits on: ``kind`` (``retry``, ``timer``, ``webhook``,
    ``sub_workflow``...) at ``node``, due at ``due_at`` (``None``: until a delivery or a
    child's end)."""

    kind: str
    node: str | None
    due_at: datetime | None


@attrs.frozen
class Page:
    """One page: its rows (a record that could not be read as an ``UnreadableRow``), the
    failure of each failed row and the wait of each suspended one by id, the cursor of the
    next page (``None``: the last), and the problems met, for the caller to say."""

    rows: list[ExecutionSummary | UnreadableRow]
    failures: dict[str, Failure]
    waiting: dict[str, Waiting]
    next_after: str | None
    problems: list[str]


def failure_of(execution: WorkflowExecution) -> Failure:
    """The failure of a failed execution: its error's node and code, that node's attempts."""
    error = execution.error
    node = error.node_key if error is not None else None
    run = execution.node(node) if node is not None else None
    return Failure(
        node=node,
        code=error.code if error is not None else None,
        type=error.type if error is not None else None,
        message=error.message if error is not None else None,
        attempts=len(run.attempts) if run is not None else 0,
        failed_at=execution.completed_at or execution.updated_at,
    )


def waiting_of(execution: WorkflowExecution) -> Waiting | None:
    """What a suspended execution waits on, or ``None`` when it is not suspended."""
    if execution.status is not ExecutionStatus.SUSPENDED or execution.suspension is None:
        return None
    return Waiting(
        kind=execution.suspension.kind, node=execution.suspended_node, due_at=execution.due_at
    )


def read_page(
    store: ExecutionStore,
    status: ExecutionStatus | None,
    *,
    limit: int,
    workflow: str | None = None,
    after: str | None = None,
    code: str | None = None,
    probe: bool = True,
    waits: bool = True,
) -> Page:
    """Up to ``limit`` rows, newest first, filtered by ``status`` and ``workflow`` (the
    store's filters) and by ``code``, the failure's error code (then only failed rows,
    each loaded; at most ``MAX_SCANNED`` read per page). Failed and suspended rows are
    loaded for their failure and wait. ``probe``: ask the store for one row past the page
    to know whether another follows (a limit the store refuses is asked for as given).
    ``waits=False`` leaves suspended rows unread (``waiting`` stays empty).
    ``ExecutionNotFound`` if ``after`` names no execution; ``StoreError`` from the store."""
    problems: list[str] = []
    if code is not None:
        return _by_code(store, code, limit=limit, workflow=workflow, after=after)
    asked = limit + 1 if probe else limit
    rows = _list(store, status, asked, workflow, after, problems)
    next_after = rows[limit - 1].id if len(rows) > limit else None
    page = Page(rows[:limit], {}, {}, next_after, problems)
    return _details(store, page, waits)


def _list(
    store: ExecutionStore,
    status: ExecutionStatus | None,
    limit: int,
    workflow: str | None,
    after: str | None,
    problems: list[str],
) -> list[ExecutionSummary | UnreadableRow]:
    try:
        return list(store.list(status, limit=limit, workflow_id=workflow, after=after))
    except UnreadableRowsError as exc:  # list the rest; the bad rows by id, as unreadable
        problems.extend(exc.problems)
        return list(exc.rows)


def _details(store: ExecutionStore, page: Page, waits: bool) -> Page:
    """``page`` with each failed row's failure and each suspended row's wait, read from its
    record; a record that cannot be read is listed as an ``UnreadableRow`` (one bad record
    must not hide the rest of the page)."""
    listed: list[ExecutionSummary | UnreadableRow] = []
    wanted = (
        (ExecutionStatus.FAILED, ExecutionStatus.SUSPENDED) if waits else (ExecutionStatus.FAILED,)
    )
    for row in page.rows:
        if isinstance(row, UnreadableRow) or row.status not in wanted:
            listed.append(row)
            continue
        execution = _load(store, row, page.problems)
        if isinstance(execution, UnreadableRow):
            listed.append(execution)
            continue
        if execution is not None:
            if row.status is ExecutionStatus.FAILED:
                page.failures[row.id] = failure_of(execution)
            else:
                waiting = waiting_of(execution)  # a record moved on since: no wait to show
                if waiting is not None:
                    page.waiting[row.id] = waiting
        listed.append(row)
    page.rows[:] = listed
    return page


def _load(
    store: ExecutionStore, row: ExecutionSummary, problems: list[str]
) -> WorkflowExecution | UnreadableRow | None:
    try:
        execution, _ = store.load(row.id)
    except ExecutionNotFound:  # deleted between the listing and the load
        return None
    except RecordError as exc:
        where = f"stored execution {row.id!r} cannot be read: "
        problem = "; ".join(exc.problems) or str(exc).splitlines()[0].removeprefix(where)
        problems.append(f"stored execution {row.id!r}: {problem}")
        return UnreadableRow(id=row.id, problem=problem)
    return execution


def _by_code(
    store: ExecutionStore, code: str, *, limit: int, workflow: str | None, after: str | None
) -> Page:
    """The failed rows whose error code is ``code``: failed rows are read a chunk at a time
    until the page is full, the store has no more, or ``MAX_SCANNED`` were read."""
    problems: list[str] = []
    kept: list[ExecutionSummary | UnreadableRow] = []
    failures: dict[str, Failure] = {}
    scanned = 0
    cursor = after
    chunk = max(limit, 50)
    while True:
        rows = _list(store, ExecutionStatus.FAILED, chunk, workflow, cursor, problems)
        for row in rows:
            if len(kept) == limit or scanned == MAX_SCANNED:
                return Page(kept, failures, {}, cursor, problems)
            scanned += 1
            cursor = row.id
            if isinstance(row, UnreadableRow):
                continue
            execution = _load(store, row, problems)
            if isinstance(execution, UnreadableRow) or execution is None:
                continue
            failure = failure_of(execution)
            if failure.code == code:
                kept.append(row)
                failures[row.id] = failure
        if len(rows) < chunk:
            return Page(kept, failures, {}, None, problems)
