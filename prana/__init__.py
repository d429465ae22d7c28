"""prana: workflow graphs run as a suspension-based state machine.

The core is pure: ``execute_workflow`` runs a workflow until it completes, fails or must
pause, and returns that as a value (``Completed``, ``Failed`` or ``Suspend``). It never
sleeps; something outside (the ``scheduling`` package, or your code) calls
``resume_workflow`` when the pause is over.
"""

from prana._errors import (
    AttemptTimeout,
    DurationError,
    InvalidSettingsError,
    InvalidWorkflowError,
    NonRetryable,
    PranaError,
    RecordError,
    ResumeError,
    RetryAfter,
    WebhookTimeout,
)
from prana._events import Event, EventType, Observer
from prana._model import (
    Activation,
    AttemptOutcome,
    AttemptRecord,
    Completed,
    Connection,
    ErrorInfo,
    ExecutionStatus,
    Failed,
    Node,
    NodeExecution,
    NodeSettings,
    NodeStatus,
    Outcome,
    Output,
    ParentRef,
    RetryData,
    SubWorkflowData,
    Suspend,
    TimerData,
    WebhookData,
    Workflow,
    WorkflowExecution,
)
from prana._policy import RetryPolicy
from prana._registry import ActionContext, ActionSpec, Registry

__all__ = [
    "ActionContext",
    "ActionSpec",
    "Activation",
    "AttemptOutcome",
    "AttemptRecord",
    "AttemptTimeout",
    "Completed",
    "Connection",
    "DurationError",
    "ErrorInfo",
    "Event",
    "EventType",
    "ExecutionStatus",
    "Failed",
    "InvalidSettingsError",
    "InvalidWorkflowError",
    "Node",
    "NodeExecution",
    "NodeSettings",
    "NodeStatus",
    "NonRetryable",
    "Observer",
    "Outcome",
    "Output",
    "ParentRef",
    "PranaError",
    "RecordError",
    "Registry",
    "ResumeError",
    "RetryAfter",
    "RetryData",
    "RetryPolicy",
    "SubWorkflowData",
    "Suspend",
    "TimerData",
    "WebhookData",
    "WebhookTimeout",
    "Workflow",
    "WorkflowExecution",
]
