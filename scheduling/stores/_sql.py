"""Helpers every store shares: argument checks, time columns, reading records back.

The SQL stores and the memory reference all go through these, so they refuse the same
bad input with the same message and surface an unreadable record the same way.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import attrs

from prana import (
    ExecutionStatus,
    InvalidSettingsError,
    RecordError,
    WorkflowExecution,
    loads,
)
from prana.shell import MAX_WORKFLOW_VERSION, is_aware
from scheduling._claims import LIGHT_KINDS
from scheduling._errors import ExecutionNotFound, StaleVersionError, UnreadableRowsError
from scheduling.abc import ExecutionSummary, UnreadableRow

T = TypeVar("T")

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(when: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch: exact, and orders as time does."""
    return (when - EPOCH) // _MICROSECOND


_FIRST = datetime.min.replace(tzinfo=timezone.utc)
_LAST = datetime.max.replace(tzinfo=timezone.utc)
_FIRST_MICROS = to_micros(_FIRST)
_LAST_MICROS = to_micros(_LAST)


def from_micros(micros: int) -> datetime:
    """The inverse of ``to_micros``, in UTC.

    A column no datetime can hold (a row edited by hand) reads as the first or last
    datetime, and one holding no number (text, a blob) as the first, so listing, loading or
    finding due work never fails on it (the next save writes it again). A float (a ``REAL``
    written by a tool) reads as its number, rounded up, as SQLite compares it with whole
    microseconds (``x <= now`` exactly when ``ceil(x) <= now``): ``find_due`` and ``alarms``
    agree on when it is due.
    """
    if type(micros) is not int:
        if type(micros) is not float or micros != micros:  # text, a blob (NaN: none)
            return _FIRST
        if not _FIRST_MICROS <= micros <= _LAST_MICROS:  # infinities included
            return _FIRST if micros < _FIRST_MICROS else _LAST
        micros = math.ceil(micros)
    if _FIRST_MICROS <= micros <= _LAST_MICROS:
        return EPOCH + timedelta(microseconds=micros)
    return _FIRST if micros < _FIRST_MICROS else _LAST


def check_aware(when: Any, field: str) -> datetime:
    """``when`` if it is an aware datetime, else a clear error naming ``field``."""
    if not is_aware(when):
        raise InvalidSettingsError(
            f"{field}={when!r}: use an aware datetime, e.g. datetime.now(timezone.utc)"
        )
    return when


MAX_LIMIT = 10**9
"""The largest ``limit`` a store takes (SQL integers overflow far above it; no list is longer)."""


def check_limit(limit: Any, field: str = "limit") -> int:
    """``limit`` if it is a whole number from 1 to ``MAX_LIMIT``, else a clear error."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidSettingsError(f"{field}={limit!r}: use a whole number from 1 to {MAX_LIMIT}")
    return limit


def check_tree_args(root_id: Any, most: Any) -> int:
    """``most`` if ``count_tree``'s arguments are of the right kind, else a clear error."""
    if not isinstance(root_id, str):
        raise InvalidSettingsError(f"count_tree(root_id={root_id!r}): use an execution id (str)")
    return check_limit(most, "count_tree(most)")


def check_save(execution: Any, expected_version: Any) -> None:
    """Refuse a save whose arguments are of the wrong kind, before anything is written."""
    if not isinstance(execution, WorkflowExecution):
        raise InvalidSettingsError(
            f"save(execution={type(execution).__name__}): pass a prana.WorkflowExecution"
        )
    if expected_version is not None and (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 1
    ):
        raise InvalidSettingsError(
            f"save(expected_version={expected_version!r}): use None to create, or the "
            "version load() returned"
        )


def check_claim(
    execution_id: Any, expected_version: Any, lease_expires_at: Any, claimed_at: Any
) -> None:
    """Refuse a ``claim`` whose arguments are of the wrong kind, before anything is written."""
    if not isinstance(execution_id, str):
        raise InvalidSettingsError(f"claim(execution_id={execution_id!r}): use an execution id")
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 1
    ):
        raise InvalidSettingsError(
            f"claim(expected_version={expected_version!r}): use the version load() returned"
        )
    check_aware(lease_expires_at, "claim(lease_expires_at)")
    check_aware(claimed_at, "claim(claimed_at)")


def as_claimed(
    execution: WorkflowExecution, lease_expires_at: datetime | None, claimed_at: datetime | None
) -> WorkflowExecution:
    """What a claimed row reads as (``scheduling.abc.ClaimingStore``): its stored record,
    ``running`` since ``claimed_at`` under a lease until ``lease_expires_at``, its
    suspension kept (which tells it from a checkpoint).

    Only a retry or timer wait is ever claimed (``scheduling._claims.LIGHT_KINDS``): a row
    saying ``running`` over any other wait was edited by hand, and reading it as claimed
    would let recovery resume that wait with no data (a webhook passed without delivery),
    so it is a ``RecordError`` naming the execution and its status.
    """
    suspension = execution.suspension
    kind = None if suspension is None else suspension.kind
    if kind not in LIGHT_KINDS:
        problem = (
            f"status: the row says 'running' over a record suspended on a {kind!r} wait,"
            " which no claim makes (only retry and timer waits are claimed); set the"
            " row's status back to 'suspended'"
        )
        raise RecordError(f"stored execution {execution.id!r} cannot be read", [problem])
    return attrs.evolve(
        execution,
        status=ExecutionStatus.RUNNING,
        lease_expires_at=lease_expires_at,
        updated_at=claimed_at,
    )


def check_status(status: Any) -> ExecutionStatus | None:
    """``status`` as an ``ExecutionStatus`` (its string value is accepted too), or ``None``."""
    if status is None or isinstance(status, ExecutionStatus):
        return status
    try:
        return ExecutionStatus(status)
    except ValueError:
        choices = ", ".join(s.value for s in ExecutionStatus)
        raise InvalidSettingsError(f"status={status!r}: use one of {choices}") from None


def check_list_args(workflow_id: Any, after: Any) -> None:
    """Refuse a ``list`` filter or cursor that is not a non-empty string (or ``None``)."""
    if workflow_id is not None and (not isinstance(workflow_id, str) or not workflow_id):
        raise InvalidSettingsError(
            f"workflow_id={workflow_id!r}: use a workflow's id (a non-empty string), or None "
            "for every workflow"
        )
    if after is not None and (not isinstance(after, str) or not after):
        raise InvalidSettingsError(
            f"after={after!r}: use the id of the last execution of the previous page, or None "
            "for the first page"
        )


def list_query(
    select: str,
    table: str,
    mark: str,
    status: ExecutionStatus | None,
    workflow_id: str | None,
    after: str | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """The SQL of ``list`` and its parameters: ``select`` from ``table``, filtered, newest first.

    ``mark`` is the driver's placeholder (``?`` or ``%s``). The cursor is the ``seq`` (the
    creation order) of the execution ``after`` names, read in the same statement.
    """
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        where.append(f"status = {mark}")
        params.append(status.value)
    if workflow_id is not None:
        where.append(f"workflow_id = {mark}")
        params.append(workflow_id)
    if after is not None:
        # ``table`` is the store's own (quoted) table name; values go in as parameters.
        where.append(f"seq < (SELECT seq FROM {table} WHERE id = {mark})")  # noqa: S608
        params.append(after)
    params.append(limit)
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return f"{select}{condition} ORDER BY seq DESC LIMIT {mark}", params


def cursor_not_found(after: str) -> ExecutionNotFound:
    """The error for a ``list(after=...)`` cursor that names no stored execution."""
    return ExecutionNotFound(
        f"list(after={after!r}): no execution {after!r} is stored; start again from the "
        "first page (after=None)"
    )


def stale(execution_id: str, expected_version: int | None, stored: int | None) -> StaleVersionError:
    """The error for a refused save, saying what was expected and what is stored."""
    if expected_version is None:
        return StaleVersionError(
            f"execution {execution_id!r} already exists (version {stored}); "
            "load it and save with its version to update it"
        )
    if stored is None:
        return StaleVersionError(
            f"execution {execution_id!r} is not stored, so version {expected_version} "
            "cannot be updated; save with expected_version=None to create it"
        )
    return StaleVersionError(
        f"execution {execution_id!r}: expected version {expected_version}, but version "
        f"{stored} is stored (someone else saved first); reload it and redo the transition"
    )


def read_record(where: str, parse: Callable[[Any], T], text: Any) -> T:
    """``parse(text)``; a record that cannot be read raises ``RecordError`` naming ``where``."""
    try:
        return parse(text)
    except RecordError as exc:
        raise RecordError(
            f"{where} cannot be read: {exc.args[0] if exc.args else ''}"
            if not exc.problems
            else f"{where} cannot be read",
            exc.problems,
        ) from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RecordError(f"{where} cannot be read: {exc}") from exc


def read_execution(execution_id: str, text: Any) -> WorkflowExecution:
    """Parse a stored execution; an unreadable one raises ``RecordError`` naming the id."""
    execution = read_record(f"stored execution {execution_id!r}", loads, text)
    if execution.id != execution_id:
        raise RecordError(
            f"stored execution {execution_id!r} cannot be read",
            [f"id: the record holds execution {execution.id!r}"],
        )
    return execution


class ParsedCache:
    """The executions a store last wrote or read, keyed by id, with the JSON text they came from.

    ``load`` still reads the row; when the stored text is exactly the text this store
    wrote or parsed, the frozen record parsed (or saved) from it is returned instead of
    parsing the same text again, which is most of a load's cost. Comparing the text, not
    the version, keeps it right whoever else writes to the database. Holds at most
    ``size`` records, oldest dropped first; ``size=0`` turns it off.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidSettingsError(f"cache_size={size!r}: use a whole number >= 0 (0: off)")
        self.size = size
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, WorkflowExecution]] = {}

    def put(self, execution_id: str, text: str, execution: WorkflowExecution) -> None:
        """Remember that ``text`` reads as ``execution``."""
        if not self.size:
            return
        with self._lock:
            entries = self._entries
            entries.pop(execution_id, None)
            if len(entries) >= self.size:
                del entries[next(iter(entries))]
            entries[execution_id] = (text, execution)

    def read(self, execution_id: str, text: Any) -> WorkflowExecution:
        """The execution stored as ``text``: from the cache if it holds that text, else parsed."""
        entry = self._entries.get(execution_id)
        if entry is not None and entry[0] == text:
            return entry[1]
        execution = read_execution(execution_id, text)
        self.put(execution_id, text, execution)
        return execution

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()


def summaries_from_rows(
    rows: Sequence[Any], read_time: Callable[[Any], datetime | None]
) -> list[ExecutionSummary]:
    """``list``'s page from its rows; ``UnreadableRowsError`` holding the whole page, each
    unreadable row as an ``UnreadableRow``, when a row cannot be read."""
    readable: list[ExecutionSummary] = []
    page: list[ExecutionSummary | UnreadableRow] = []
    problems: list[str] = []
    for row in rows:
        try:
            summary = summary_from_row(row, read_time)
        except RecordError as exc:
            problem = "; ".join(exc.problems) or str(exc)
            page.append(UnreadableRow(id=row[0], problem=problem))
            problems.append(f"stored execution {row[0]!r}: {problem}")
        else:
            readable.append(summary)
            page.append(summary)
    if not problems:
        return readable
    raise UnreadableRowsError(
        f"{len(problems)} listed execution(s) cannot be read",
        problems,
        page,
    )


def summary_from_row(row: Any, read_time: Callable[[Any], datetime | None]) -> ExecutionSummary:
    """An ``ExecutionSummary`` from a ``list`` row; ``read_time`` turns a stored time into one.

    A column holding what no save writes (SQLite keeps any value in any column: a blob as
    the workflow id, text as a version) raises ``RecordError`` naming it, so the row is
    listed as unreadable rather than as read (a blob broke ``prana list --json``).
    """
    eid, workflow_id, workflow_version, status, version, due_at, updated_at = row
    if type(workflow_id) is not str:
        raise RecordError(
            f"stored execution {eid!r} cannot be read",
            [f"workflow_id: the row's workflow id is {workflow_id!r}, not text"],
        )
    if type(workflow_version) is not int or not 1 <= workflow_version <= MAX_WORKFLOW_VERSION:
        raise RecordError(
            f"stored execution {eid!r} cannot be read",
            [
                (
                    f"workflow_version: the row's workflow version is {workflow_version!r}, "
                    f"not a whole number from 1 to {MAX_WORKFLOW_VERSION}"
                )
            ],
        )
    return ExecutionSummary(
        id=eid,
        workflow_id=workflow_id,
        workflow_version=workflow_version,
        status=read_status(eid, status),
        version=read_version(eid, version),
        due_at=read_time(due_at),
        updated_at=read_time(updated_at),
    )


MAX_VERSION = 2**62
"""The largest version a row is read with: past any number of saves, and far enough
below the 64-bit column's limit that the saves after it still fit."""


def read_version(execution_id: str, value: Any) -> int:
    """A stored version column, or ``RecordError`` naming the id for one no save makes.

    A version edited by hand (text, a float, 0 or less, or so big that the next save would
    overflow the column) would be returned by ``load`` and refused only by the next save or
    claim, with an error no worker expects: so ``run_due`` stopped at that row. Unreadable,
    the row is left as stored and the worker goes on.
    """
    if type(value) is int and 1 <= value <= MAX_VERSION:
        return value
    raise RecordError(
        f"stored execution {execution_id!r} cannot be read",
        [f"version: the row's version is {value!r}, not a whole number from 1 to 2**62"],
    )


def read_status(execution_id: str, value: Any) -> ExecutionStatus:
    """A stored status column as an ``ExecutionStatus``, or ``RecordError`` naming the id."""
    try:
        return ExecutionStatus(value)
    except ValueError:
        raise RecordError(
            f"stored execution {execution_id!r} cannot be read",
            [f"status: {value!r} is not an execution status"],
        ) from None
