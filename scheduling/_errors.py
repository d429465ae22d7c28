"""Errors of the scheduling shell; all derive from ``prana.PranaError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prana import PranaError, RecordError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from prana import ExecutionStatus
    from scheduling.abc import ExecutionSummary, UnreadableRow


class StoreError(PranaError):
    """Base of every store error."""


class StaleVersionError(StoreError):
    """A save named a version that is no longer current: someone else saved first.

    Reload the execution, and redo the transition on the newer record if it still applies.
    """


class ExecutionNotFound(StoreError, LookupError):  # noqa: N818 - reads as what happened
    """No execution with that id is stored."""


class UnreadableRowsError(RecordError):
    """``ExecutionStore.list`` found rows it cannot read (a hand-edited status, say).

    The message names each such row and what is wrong with it. ``rows`` is the page it
    would have returned, in order, each unreadable row as an ``UnreadableRow``: a listing
    shows those by id and lists the rest, instead of refusing the whole page.
    """

    def __init__(
        self,
        message: str,
        problems: Sequence[str],
        rows: Sequence[ExecutionSummary | UnreadableRow],
    ) -> None:
        super().__init__(message, problems)
        self.rows = tuple(rows)


class WorkflowNotFound(StoreError, LookupError):  # noqa: N818 - reads as what happened
    """No workflow definition with that id and version is stored."""


class WorkflowConflictError(StoreError, ValueError):
    """A different definition is already stored under this workflow id and version.

    A definition never changes for a given id and version: bump ``Workflow.version``.
    """


class SchedulerStateError(PranaError, RuntimeError):
    """A scheduler was used out of order (firing before ``start``, starting twice, no loop).

    The message names the call to make first.
    """


class HookError(PranaError):
    """Base of the errors a delivery by resume token gets; ``status`` is its HTTP status."""

    status = 400


class HookNotFound(HookError, LookupError):  # noqa: N818 - reads as what happened
    """No webhook wait answers to this token (malformed, unknown, or not this wait's token)."""

    status = 404


class HookGone(HookError):  # noqa: N818 - reads as what happened
    """The token's wait is over: used already, expired, or its execution moved on or ended.

    Nothing changed; the sender should stop retrying this delivery.
    """

    status = 410


class HookConflict(HookError):  # noqa: N818 - reads as what happened
    """A cancel, an expiry or another delivery won the race for this wait; nothing changed."""

    status = 409


class HookAlreadyDelivered(HookError):  # noqa: N818 - reads as what happened
    """This very delivery (the same token, the same JSON) was applied already: a sender cut
    off mid-request retried. Nothing ran again; ``status`` is 200, a success to answer.

    ``execution_id`` and ``execution_status`` say where the execution stands now.
    """

    status = 200

    def __init__(self, execution_id: str, execution_status: ExecutionStatus) -> None:
        super().__init__(f"this delivery was applied already to execution {execution_id!r}")
        self.execution_id = execution_id
        self.execution_status = execution_status
