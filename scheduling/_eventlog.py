"""Log lines for a run's events: one line per meaningful event, its fields in ``extra``.

The runner hands ``log_event`` to the executor with its own observers whenever logging is
configured (a handler other than the library's ``NullHandler`` would receive the lines),
so a workflow run by a ``Runner`` logs through the stdlib with no setup beyond that:

================================  ========  =============================================
event                             level     message
================================  ========  =============================================
``execution_started``             INFO      ``execution <id> of <workflow> started``
``node_retry_scheduled``          INFO      ``... node <key> failed (<error>); attempt
                                            <next>/<max> retrying in <delay>``
``node_retry_exhausted``          INFO      ``... node <key> gave up after <n> attempt(s)``
``node_failed``                   INFO      ``... node <key> failed (attempt <n>): <error>``,
                                            then its traceback at DEBUG
``execution_suspended``           INFO      ``... waits on <kind> at <key>`` (DEBUG: retry)
``execution_completed``           INFO      ``execution <id> of <workflow> completed``
``execution_failed``              WARNING   ``... of <workflow> failed at node <key>:
                                            <error>``: the one WARNING of a failure
``execution_cancelled``           INFO      ``execution <id> of <workflow> cancelled``
other node and resume events      DEBUG     ``... node <key> started (attempt <n>)``, ...
================================  ========  =============================================

Durations are written by ``prana.shell.format_duration``, as on the console and the web
page (``250ms``, ``2.0s``, ``1m30s``).

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
from prana.shell import emit, format_duration

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LOGGER_NAME", "HeldEvents", "log_event", "wanted"]

LOGGER_NAME = "scheduling.events"
logger = logging.getLogger(LOGGER_NAME)

_LEVELS = {
    EventType.EXECUTION_STARTED: logging.INFO,
    EventType.NODE_RETRY_SCHEDULED: logging.INFO,
    EventType.NODE_RETRY_EXHAUSTED: logging.INFO,
    EventType.NODE_FAILED: logging.INFO,
    EventType.EXECUTION_SUSPENDED: logging.INFO,
    EventType.EXECUTION_COMPLETED: logging.INFO,
    EventType.EXECUTION_FAILED: logging.WARNING,
    EventType.EXECUTION_CANCELLED: logging.INFO,
    EventType.EXECUTION_REDRIVEN: logging.INFO,
    EventType.EXECUTION_RECOVERED: logging.WARNING,
}
"""One WARNING per failed execution (``execution_failed``): a node's failure is INFO, as
``on_error`` may continue past it; when it ends the execution, that line says so."""


def _message(event: Event) -> str:
    head = f"execution {event.execution_id}"
    error = f"{event.error.type}: {event.error.message}" if event.error is not None else ""
    node = f"node {event.node_key}"
    attempt = f" (attempt {event.attempt})" if event.attempt is not None else ""
    kind = event.type
    if kind is EventType.EXECUTION_STARTED:
        return f"{head} of {event.workflow_id} started"
    if kind is EventType.NODE_STARTED:
        return f"{head}: {node} started{attempt}"
    if kind is EventType.NODE_COMPLETED:
        return f"{head}: {node} completed{attempt}"
    if kind is EventType.NODE_RETRY_SCHEDULED:
        of = f"/{event.max_attempts}" if event.max_attempts is not None else ""
        delay = format_duration((event.delay_ms or 0) / 1000)
        return f"{head}: {node} failed ({error}); attempt {event.attempt}{of} retrying in {delay}"
    if kind is EventType.NODE_RETRY_EXHAUSTED:
        return f"{head}: {node} gave up after {event.attempt} attempt(s): {error}"
    if kind is EventType.NODE_FAILED:
        return f"{head}: {node} failed{attempt}: {error}"
    if kind is EventType.NODE_SUSPENDED:
        return f"{head}: {node} waits on {event.kind}"
    if kind is EventType.NODE_RESUMED:
        return f"{head}: {node} resumed ({event.kind})"
    if kind is EventType.EXECUTION_SUSPENDED:
        return f"{head} waits on {event.kind} at {event.node_key}"
    if kind is EventType.EXECUTION_RESUMED:
        return f"{head} of {event.workflow_id} resumed ({event.kind})"
    if kind is EventType.EXECUTION_COMPLETED:
        return f"{head} of {event.workflow_id} completed"
    if kind is EventType.EXECUTION_CANCELLED:
        return f"{head} of {event.workflow_id} cancelled"
    if kind is EventType.EXECUTION_FAILED:
        where = event.node_key or (event.error.node_key if event.error is not None else None)
        at = f" at node {where}{attempt}" if where is not None else ""
        return f"{head} of {event.workflow_id} failed{at}: {error or 'no error recorded'}"
    if kind is EventType.EXECUTION_REDRIVEN:
        return f"{head} redriven from {node}{attempt} after {error}"
    if kind is EventType.EXECUTION_RECOVERED:
        return (
            f"{head} taken up again: attempt {event.attempt} of {node} was "
            "interrupted (its process stopped)"
        )
    return f"{head}: {event.name.replace('_', ' ')}"  # an event type added later


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
    if (
        event.type is EventType.NODE_FAILED
        and error is not None
        and error.traceback
        and logger.isEnabledFor(logging.DEBUG)
    ):
        logger.debug(
            "execution %s: node %s failed here:\n%s",
            *(event.execution_id, event.node_key, error.traceback),
            extra=extra,
        )


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
