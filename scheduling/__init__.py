"""scheduling: the imperative shell that waits out prana's suspensions and resumes them."""

from scheduling import _ownership
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

__prana_shell__ = True  # tells this package from the unrelated PyPI `scheduling` (_ownership)
_ownership.check()

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
