"""scheduling: the imperative shell that waits out prana's suspensions and resumes them."""

import logging as _logging

from scheduling import _ownership
from scheduling._console import ConsoleView, RetryStats
from scheduling._errors import (
    ExecutionNotFound,
    HookAlreadyDelivered,
    HookConflict,
    HookError,
    HookGone,
    HookNotFound,
    SchedulerStateError,
    StaleVersionError,
    StoreError,
    UnreadableRowsError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling._runner import Runner
from scheduling._schedule_runs import ScheduleNotFound, SlotOutcome, StoredSchedule
from scheduling._schedules import At, Cron, Every, Schedule
from scheduling.abc import ExecutionStore, ExecutionSummary, Fire, Scheduler, UnreadableRow

__prana_shell__ = True  # tells this package from the unrelated PyPI `scheduling` (_ownership)
_ownership.check()
_logging.getLogger("scheduling").addHandler(_logging.NullHandler())

__all__ = [
    "At",
    "ConsoleView",
    "Cron",
    "Every",
    "ExecutionNotFound",
    "ExecutionStore",
    "ExecutionSummary",
    "Fire",
    "HookAlreadyDelivered",
    "HookConflict",
    "HookError",
    "HookGone",
    "HookNotFound",
    "RetryStats",
    "Runner",
    "Schedule",
    "ScheduleNotFound",
    "Scheduler",
    "SchedulerStateError",
    "SlotOutcome",
    "StaleVersionError",
    "StoreError",
    "StoredSchedule",
    "UnreadableRow",
    "UnreadableRowsError",
    "WorkflowConflictError",
    "WorkflowNotFound",
]
