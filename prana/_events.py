"""Events: what observers see of a run, one typed record per transition.

An observer is any callable taking an ``Event``. Observers run in the order given; one
that raises is logged at ERROR with its traceback (logger ``prana.events``) and the run
goes on, since watching must never change what is watched.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from prana._model import ErrorInfo


class EventType(enum.Enum):
    """Every kind of event a run emits."""

    EXECUTION_STARTED = "execution_started"
    """A run began (``Runner.start``, ``execute_workflow``)."""
    NODE_STARTED = "node_started"
    """An attempt of a node began (a retry and a re-run after an interruption too)."""
    NODE_COMPLETED = "node_completed"
    """A node run ended with an output (also a failure ``on_error`` continued past)."""
    NODE_FAILED = "node_failed"
    """An attempt failed and no retry follows; ``error`` says why, ``on_error`` decides next."""
    NODE_RETRY_SCHEDULED = "node_retry_scheduled"
    """An attempt failed and ``attempt`` (the next) is due after ``delay_ms``."""
    NODE_RETRY_EXHAUSTED = "node_retry_exhausted"
    """An attempt failed and the policy allows no other (count, budget or a condition)."""
    NODE_SUSPENDED = "node_suspended"
    """A node paused the run (a timer, a webhook, a sub-workflow, an action's own wait)."""
    NODE_RESUMED = "node_resumed"
    """A paused node was given its resume data."""
    EXECUTION_SUSPENDED = "execution_suspended"
    """The run waits; ``kind`` says on what (``retry``, ``timer``, ``webhook``...)."""
    EXECUTION_RESUMED = "execution_resumed"
    """A suspended execution runs again (its alarm fired, or a delivery)."""
    EXECUTION_COMPLETED = "execution_completed"
    """The run ended with an output."""
    EXECUTION_FAILED = "execution_failed"
    """The run failed; ``error`` is the node's error that failed it."""
    EXECUTION_CANCELLED = "execution_cancelled"
    """The run was cancelled."""
    EXECUTION_REDRIVEN = "execution_redriven"
    """An operator took a failed execution up again (``redrive_execution``):
    ``node_key`` and ``attempt`` say where it restarts, ``error`` what it had failed
    with."""
    EXECUTION_RECOVERED = "execution_recovered"
    """A ``running`` execution a dead process left was taken up again (``recover_execution``):
    ``node_key``, ``attempt`` and ``error`` say which attempt was interrupted."""


@attrs.frozen(kw_only=True)
class Event:
    """One transition of an execution, as plain data.

    Node events carry ``node_key``, ``run_index`` and ``attempt``; retry events also carry
    ``delay_ms``, ``max_attempts`` and the ``error`` (``node_started`` its node's
    ``max_attempts`` too); suspension events carry ``kind``.
    """

    type: EventType
    execution_id: str
    workflow_id: str
    at: datetime
    node_key: str | None = None
    run_index: int | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    delay_ms: int | None = None
    error: ErrorInfo | None = None
    kind: str | None = None
    output: Any = None

    @property
    def name(self) -> str:
        """The event's name, e.g. ``"node_retry_scheduled"``."""
        return self.type.value


Observer = Callable[[Event], object]

logging.getLogger("prana").addHandler(logging.NullHandler())  # a library never prints
logger = logging.getLogger("prana.events")


def emit(observers: Sequence[Observer], event: Event) -> None:
    """Send ``event`` to every observer; one that raises is logged at ERROR, never fatal."""
    for observer in observers:
        try:
            observer(event)
        except Exception:
            logger.exception(
                "observer %r raised on %s of execution %s; the run goes on",
                observer,
                event.name,
                event.execution_id,
                extra={
                    "prana_event": event.name,
                    "execution_id": event.execution_id,
                    "node_key": event.node_key,
                    "observer": repr(observer),
                },
            )
