"""OpenTelemetry spans for runs: one per node attempt, one per start or resume step.

Install with ``pip install 'prana-workflows[otel]'`` (``opentelemetry-api`` only; bring your SDK and
exporter). Add the observer to a runner::

    from scheduling.otel import TracingObserver
    runner = Runner(registry, store, observers=[TracingObserver()])

Spans (``tracer`` name ``prana``):

- ``prana.start`` / ``prana.resume``: one step of an execution, from the run's start (or
  its resume) until it completes, fails, is cancelled or suspends again;
- ``prana.attempt``: one attempt of one node, a child of its step, ended by the attempt's
  outcome (completed, failed, retry scheduled, suspended). Its status is ERROR when the
  attempt failed.

Attributes: ``prana.execution_id``, ``prana.workflow_id``, ``prana.node_key``,
``prana.run_index``, ``prana.attempt``, ``prana.max_attempts``, ``prana.outcome``, and for
a scheduled retry ``prana.retry.delay_ms`` and ``prana.retry.next_attempt``; for a
failure ``prana.error.type``, ``prana.error.code``, ``prana.error.message``; for a
suspension ``prana.suspend.kind``.

One trace per execution, across processes: its trace id is derived from the execution id
(a child sub-workflow's from its root parent's), so a retry resumed hours later by another
process joins the same trace without anything stored. A start made inside an active span
(an HTTP request, say) links to that span.
"""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Any

from prana import Event, EventType

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["TracingObserver", "trace_id_for"]

_MAX_OPEN = 10_000
"""Spans left open by a step that never ended (a crash) are dropped past this many."""

_ATTEMPT_ENDS = {
    EventType.NODE_COMPLETED: "completed",
    EventType.NODE_FAILED: "failed",
    EventType.NODE_RETRY_SCHEDULED: "retry_scheduled",
    EventType.NODE_SUSPENDED: "suspended",
}
_STEP_ENDS = {
    EventType.EXECUTION_SUSPENDED: "suspended",
    EventType.EXECUTION_COMPLETED: "completed",
    EventType.EXECUTION_FAILED: "failed",
    EventType.EXECUTION_CANCELLED: "cancelled",
}


def _root_id(execution_id: str) -> str:
    """A child sub-workflow's id starts with its parent's (``parent:node:run:attempt``)."""
    return execution_id.split(":", 1)[0]


def trace_id_for(execution_id: str) -> int:
    """The 128-bit trace id every span of ``execution_id`` (and its children) belongs to."""
    digest = hashlib.sha256(b"prana-trace\x00" + _root_id(execution_id).encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def _parent_span_id(execution_id: str) -> int:
    digest = hashlib.sha256(b"prana-span\x00" + _root_id(execution_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _ns(event: Event) -> int:
    return int(event.at.timestamp() * 1_000_000_000)


class TracingObserver:
    """An observer that turns a run's events into OpenTelemetry spans (see the module doc)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.tracer: Tracer = trace.get_tracer("prana", tracer_provider=tracer_provider)
        self._lock = threading.Lock()
        self._steps: dict[str, Span] = {}
        self._attempts: dict[tuple[str, str, int], Span] = {}

    def __repr__(self) -> str:
        return f"<TracingObserver tracer={self.tracer!r}>"

    def _common(self, event: Event) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "prana.execution_id": event.execution_id,
            "prana.workflow_id": event.workflow_id,
        }
        if event.node_key is not None:
            attributes["prana.node_key"] = event.node_key
        if event.run_index is not None:
            attributes["prana.run_index"] = event.run_index
        return attributes

    def _execution_context(self, execution_id: str) -> Any:
        trace = self._trace
        parent = trace.SpanContext(
            trace_id=trace_id_for(execution_id),
            span_id=_parent_span_id(execution_id),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(parent))

    def __call__(self, event: Event) -> None:
        kind = event.type
        if kind in (EventType.EXECUTION_STARTED, EventType.EXECUTION_RESUMED):
            self._start_step(event)
        elif kind is EventType.NODE_STARTED:
            self._start_attempt(event)
        elif kind in _ATTEMPT_ENDS:
            self._end_attempt(event, _ATTEMPT_ENDS[kind])
        elif kind is EventType.NODE_RETRY_EXHAUSTED:
            self._annotate_step(event, "prana.retry.exhausted", True)
        if kind in _STEP_ENDS:
            self._end_step(event, _STEP_ENDS[kind])

    def _start_step(self, event: Event) -> None:
        name = "prana.start" if event.type is EventType.EXECUTION_STARTED else "prana.resume"
        links = []
        current = self._trace.get_current_span().get_span_context()
        if current.is_valid:
            links.append(self._trace.Link(current))
        attributes = self._common(event)
        if event.kind is not None:
            attributes["prana.resume.kind"] = event.kind
        span = self.tracer.start_span(
            name,
            context=self._execution_context(event.execution_id),
            attributes=attributes,
            links=links,
            start_time=_ns(event),
        )
        with self._lock:
            old = self._steps.pop(event.execution_id, None)
            self._steps[event.execution_id] = span
            self._trim(self._steps)
        if old is not None:
            old.end()

    def _start_attempt(self, event: Event) -> None:
        assert event.node_key is not None
        with self._lock:
            step = self._steps.get(event.execution_id)
        context = (
            self._trace.set_span_in_context(step)
            if step is not None
            else self._execution_context(event.execution_id)
        )
        attributes = self._common(event)
        if event.attempt is not None:
            attributes["prana.attempt"] = event.attempt
        span = self.tracer.start_span(
            "prana.attempt", context=context, attributes=attributes, start_time=_ns(event)
        )
        key = (event.execution_id, event.node_key, event.run_index or 0)
        with self._lock:
            old = self._attempts.pop(key, None)
            self._attempts[key] = span
            self._trim(self._attempts)
        if old is not None:
            old.end()

    def _end_attempt(self, event: Event, outcome: str) -> None:
        if event.node_key is None:
            return
        key = (event.execution_id, event.node_key, event.run_index or 0)
        with self._lock:
            span = self._attempts.pop(key, None)
        if span is None:
            return
        span.set_attribute("prana.outcome", outcome)
        if event.max_attempts is not None:
            span.set_attribute("prana.max_attempts", event.max_attempts)
        if event.type is EventType.NODE_RETRY_SCHEDULED:
            if event.delay_ms is not None:
                span.set_attribute("prana.retry.delay_ms", event.delay_ms)
            if event.attempt is not None:
                span.set_attribute("prana.retry.next_attempt", event.attempt)
        if event.kind is not None:
            span.set_attribute("prana.suspend.kind", event.kind)
        error = event.error
        if error is not None:
            span.set_attribute("prana.error.type", error.type)
            span.set_attribute("prana.error.code", error.code)
            span.set_attribute("prana.error.message", error.message)
        if outcome in ("failed", "retry_scheduled"):
            status = self._trace.Status(
                self._trace.StatusCode.ERROR,
                f"{error.type}: {error.message}" if error is not None else outcome,
            )
            span.set_status(status)
        span.end(end_time=_ns(event))

    def _annotate_step(self, event: Event, key: str, value: Any) -> None:
        with self._lock:
            step = self._steps.get(event.execution_id)
        if step is not None:
            step.set_attribute(key, value)

    def _end_step(self, event: Event, outcome: str) -> None:
        with self._lock:
            step = self._steps.pop(event.execution_id, None)
        if step is None:
            return
        step.set_attribute("prana.outcome", outcome)
        if event.kind is not None:
            step.set_attribute("prana.suspend.kind", event.kind)
        if outcome == "failed":
            error = event.error
            message = f"{error.type}: {error.message}" if error is not None else "failed"
            step.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))
        step.end(end_time=_ns(event))

    @staticmethod
    def _trim(spans: dict[Any, Span]) -> None:
        while len(spans) > _MAX_OPEN:
            spans.pop(next(iter(spans))).end()
