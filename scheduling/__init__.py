"""scheduling: the imperative shell that waits out prana's suspensions and resumes them."""

from scheduling._errors import (
    ExecutionNotFound,
    StaleVersionError,
    StoreError,
    WorkflowConflictError,
    WorkflowNotFound,
)
from scheduling.abc import ExecutionStore, ExecutionSummary, Fire, Scheduler

__all__ = [
    "ExecutionNotFound",
    "ExecutionStore",
    "ExecutionSummary",
    "Fire",
    "Scheduler",
    "StaleVersionError",
    "StoreError",
    "WorkflowConflictError",
    "WorkflowNotFound",
]
