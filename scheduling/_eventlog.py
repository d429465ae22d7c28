"""Log lines for a run's events: one line per meaningful event, its fields in ``extra``.

The runner hands ``log_event`` to the executor with its own observers whenever logging is
configured (a handler other than the library's ``NullHandler`` would receive the lines),
so a workflow run by a ``Runner`` logs through the stdlib with no setup beyond that:

================================  ========  =============================================
event                             level     message
================================  ========  =============================================
``execution_started``             INFO      ``execution <id> of <workflow> started``
``node_retry_scheduled``          INFO      ``... node <key> failed (<error>); attempt
                                            <next>/<max> retrying in <delay>s``
``node_retry_exhausted``          WARNING   ``... node <key> gave up after <n> attempt(s)``
``node_failed``                   WARNING   ``... node <key> failed: <error>``
``execution_suspended``           INFO      ``... waits on <kind> at <key>`` (DEBUG: retry)
``execution_completed``           INFO
``execution_failed``              WARNING
``execution_cancelled``           INFO
other node and resume events      DEBUG
================================  ========  =============================================

``attempt`` is the event's: for a scheduled retry, the attempt that will run next.
Fields (``LogRecord`` attributes): ``prana_event``, ``execution_id``, ``workflow_id``,
``node_key``, ``run_index``, ``attempt``, ``max_attempts``, ``delay_ms``, ``kind``,
``error_type``, ``error_message``; absent values are ``None``.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING, Any

from prana import Event, EventType
from prana.shell import emit

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LOGGER_NAME", "HeldEvents", "log_event", "wanted"]

LOGGER_NAME = "scheduling.events"
logger = logging.getLogger(LOGGER_NAME)

_LEVELS = {
    EventType.EXECUTION_STARTED: logging.INFO,
    EventType.NODE_RETRY_SCHEDULED: logging.INFO,
    EventType.NODE_RETRY_EXHAUSTED: logging.WARNING,
    EventType.NODE_FAILED: logging.WARNING,
    EventType.EXECUTION_SUSPENDED: logging.INFO,
    EventType.EXECUTION_COMPLETED: logging.INFO,
    EventType.EXECUTION_FAILED: logging.WARNING,
    EventType.EXECUTION_CANCELLED: logging.INFO,
    EventType.EXECUTION_REDRIVEN: logging.INFO,
    EventType.EXECUTION_RECOVERED: logging.WARNING,
}


def _message(event: Event) -> str:
    head = f"execution {event.execution_id}"
    error = f"{event.error.type}: {event.error.message}" if event.error is not None else ""
    kind = event.type
    if kind is EventType.EXECUTION_STARTED:
        return f"{head} of {event.workflow_id} started"
    if kind is EventType.NODE_RETRY_SCHEDULED:
        of = f"/{event.max_attempts}" if event.max_attempts is not None else ""
        delay = (event.delay_ms or 0) / 1000
        return (
            f"{head}: node {event.node_key} failed ({error}); attempt {event.attempt}{of} "
            f"retrying in {delay:g}s"
        )
    if kind is EventType.NODE_RETRY_EXHAUSTED:
        return f"{head}: node {event.node_key} gave up after {event.attempt} attempt(s): {error}"
    if kind is EventType.NODE_FAILED:
        return f"{head}: node {event.node_key} failed: {error}"
    if kind is EventType.EXECUTION_SUSPENDED:
        return f"{head} waits on {event.kind} at {event.node_key}"
    if kind is EventType.EXECUTION_FAILED:
        return f"{head} failed: {error}" if error else f"{head} failed"
    if kind is EventType.EXECUTION_REDRIVEN:
        return f"{head} redriven from node {event.node_key} (attempt {event.attempt}) after {error}"
    if kind is EventType.EXECUTION_RECOVERED:
        return (
            f"{head} taken up again: attempt {event.attempt} of node {event.node_key} was "
            "interrupted (its process stopped)"
        )
    where = f" node {event.node_key}" if event.node_key is not None else ""
    return f"{head}:{where} {event.name}"


def wanted() -> bool:
    """Whether a run's events should be built for the log: some handler would emit them.

    With logging left unconfigured (only the library's ``NullHandler``) nothing would be
    printed, so a runner skips building events for it and pays nothing.
    """
    if not logger.isEnabledFor(logging.WARNING):
        return False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if type(handler) is not logging.NullHandler:
                return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def log_event(event: Event) -> None:
    """Log ``event`` at its level on ``scheduling.events`` (nothing if that level is off)."""
    level = _LEVELS.get(event.type, logging.DEBUG)
    if event.kind == "retry" and event.type is EventType.EXECUTION_SUSPENDED:
        level = logging.DEBUG  # the retry's own line (node_retry_scheduled) says it all
    if not logger.isEnabledFor(level):
        return
    error = event.error
    extra: dict[str, Any] = {
        "prana_event": event.name,
        "execution_id": event.execution_id,
        "workflow_id": event.workflow_id,
        "node_key": event.node_key,
        "run_index": event.run_index,
        "attempt": event.attempt,
        "max_attempts": event.max_attempts,
        "delay_ms": event.delay_ms,
        "kind": event.kind,
        "error_type": error.type if error is not None else None,
        "error_message": error.message if error is not None else None,
    }
    logger.log(level, "%s", _message(event), extra=extra)


class HeldEvents:
    """A runner step's events, held until the state they lead to is stored.

    The core emits a step's events as it computes them, before the runner saves the step;
    an observer handed them at once would report what the store may never keep (a step
    whose save loses its compare-and-set to a cancel, or to another runner). The runner
    passes this as the step's only observer and calls ``release`` once a save is stored:
    each checkpoint's (the claim before an action call), then the final one (in a batch,
    once its group has committed). A step that loses drops what it holds: the observers
    never hear of it. Each event reaches the observers in the context it was emitted in
    (an OpenTelemetry tracer reads its span there).
    """

    __slots__ = ("held", "observers")

    def __init__(self, observers: tuple[Callable[[Event], object], ...]) -> None:
        self.observers = observers
        self.held: list[tuple[Event, contextvars.Context]] = []

    def __call__(self, event: Event) -> None:
        self.held.append((event, contextvars.copy_context()))

    def release(self) -> None:
        """Hand every held event to the observers, in order (one that raises is logged)."""
        held, self.held = self.held, []
        observers = self.observers
        for event, context in held:
            context.run(emit, observers, event)
