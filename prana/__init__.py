"""prana: workflow graphs run as a suspension-based state machine.

The core is pure: ``execute_workflow`` runs a workflow until it completes, fails or must
pause, and returns that as a value (``Completed``, ``Failed`` or ``Suspend``). It never
sleeps; something outside (the ``scheduling`` package, or your code) calls
``resume_workflow`` when the pause is over.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing is a third of what ``import prana`` costs
if TYPE_CHECKING:
    from typing import Any

    __version__: str

    from prana._decision import AttemptView
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
    from prana._events import (
        Event,
        EventType,
        Observer,
    )
    from prana._executor import (
        aexecute_workflow,
        aresume_workflow,
        cancel_execution,
        execute_workflow,
        resume_workflow,
    )
    from prana._graph import validate
    from prana._limits import Limits
    from prana._lint import (
        LintWarning,
        lint,
    )
    from prana._model import (
        Activation,
        AttemptOutcome,
        AttemptRecord,
        Completed,
        Connection,
        ErrorCode,
        ErrorInfo,
        ExecutionStatus,
        Failed,
        JSONValue,
        Node,
        NodeExecution,
        NodeSettings,
        NodeStatus,
        Outcome,
        Output,
        Pause,
        RetryData,
        SubWorkflowData,
        Suspend,
        TimerData,
        WebhookData,
        Workflow,
        WorkflowExecution,
    )
    from prana._policy import (
        RetryPolicy,
        Schedule,
        ScheduleRow,
    )
    from prana._redrive import redrive_execution
    from prana._registry import (
        ActionContext,
        ActionSpec,
        Registry,
    )
    from prana._serialization import (
        SCHEMA_VERSION,
        dumps,
        dumps_workflow,
        loads,
        loads_workflow,
        make_converter,
    )

_MODULES = {
    "prana._decision": "AttemptView",
    "prana._errors": (
        "AttemptTimeout DurationError InvalidSettingsError InvalidWorkflowError NonRetryable "
        "PranaError RecordError ResumeError RetryAfter WebhookTimeout"
    ),
    "prana._events": "Event EventType Observer",
    "prana._executor": (
        "aexecute_workflow aresume_workflow cancel_execution execute_workflow resume_workflow"
    ),
    "prana._graph": "validate",
    "prana._limits": "Limits",
    "prana._lint": "LintWarning lint",
    "prana._model": (
        "Activation AttemptOutcome AttemptRecord Completed Connection ErrorCode ErrorInfo "
        "ExecutionStatus Failed JSONValue Node NodeExecution NodeSettings NodeStatus Outcome "
        "Output Pause RetryData SubWorkflowData Suspend TimerData WebhookData Workflow "
        "WorkflowExecution"
    ),
    "prana._policy": "RetryPolicy Schedule ScheduleRow",
    "prana._redrive": "redrive_execution",
    "prana._registry": "ActionContext ActionSpec Registry",
    "prana._serialization": (
        "SCHEMA_VERSION dumps dumps_workflow loads loads_workflow make_converter"
    ),
}
"""Where each public name lives. Each is imported on first use (``from prana import X`` or
``prana.X``), so ``import prana`` costs almost nothing and a run loads only what it uses."""
_LAZY = {name: module for module, names in _MODULES.items() for name in names.split()}


_DISTRIBUTION = "prana-workflows"
"""The name prana is published under (``pip install prana-workflows``); imported as ``prana``."""


def _version() -> str:
    """The installed distribution's version; ``0+unknown`` when running from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # Read from the installed metadata on first use: importlib.metadata costs import time.
        value = globals()[name] = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'prana' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ActionContext",
    "ActionSpec",
    "Activation",
    "AttemptOutcome",
    "AttemptRecord",
    "AttemptTimeout",
    "AttemptView",
    "Completed",
    "Connection",
    "DurationError",
    "ErrorCode",
    "ErrorInfo",
    "Event",
    "EventType",
    "ExecutionStatus",
    "Failed",
    "InvalidSettingsError",
    "InvalidWorkflowError",
    "JSONValue",
    "Limits",
    "LintWarning",
    "Node",
    "NodeExecution",
    "NodeSettings",
    "NodeStatus",
    "NonRetryable",
    "Observer",
    "Outcome",
    "Output",
    "Pause",
    "PranaError",
    "RecordError",
    "Registry",
    "ResumeError",
    "RetryAfter",
    "RetryData",
    "RetryPolicy",
    "SCHEMA_VERSION",
    "Schedule",
    "ScheduleRow",
    "SubWorkflowData",
    "Suspend",
    "TimerData",
    "WebhookData",
    "WebhookTimeout",
    "Workflow",
    "WorkflowExecution",
    "aexecute_workflow",
    "aresume_workflow",
    "cancel_execution",
    "dumps",
    "dumps_workflow",
    "execute_workflow",
    "lint",
    "loads",
    "loads_workflow",
    "make_converter",
    "redrive_execution",
    "resume_workflow",
    "validate",
]
