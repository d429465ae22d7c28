"""scheduling: the imperative shell that waits out prana's suspensions and resumes them."""

from scheduling._console import ConsoleView, RetryStats
from scheduling._errors import (
    ExecutionNotFound,
    SchedulerStateError,
    StaleVersionError,
    StoreError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling._runner import Runner
from scheduling.abc import ExecutionStore, ExecutionSummary, Fire, Scheduler

__all__ = [
    "ConsoleView",
    "ExecutionNotFound",
    "ExecutionStore",
    "ExecutionSummary",
    "Fire",
    "RetryStats",
    "Runner",
    "Scheduler",
    "SchedulerStateError",
    "StaleVersionError",
    "StoreError",
    "WorkflowConflictError",
    "WorkflowNotFound",
]
