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
  attempt failed, with ``error.type`` and an ``exception`` event (``exception.type``,
  ``exception.message``, ``exception.stacktrace``: the recorded traceback). It is the
  current span while the action runs (inside ``begin``/``resume``, as a ``Runner`` runs
  every step), so a span the action opens is its child.

Attributes: ``prana.execution_id``, ``prana.workflow_id``, ``prana.node_key``,
``prana.run_index``, ``prana.attempt``, ``prana.max_attempts``, ``prana.outcome``, and for
a scheduled retry ``prana.retry.delay_ms`` and ``prana.retry.next_attempt``; for a
failure ``prana.error.type``, ``prana.error.code``, ``prana.error.message``; for a
suspension ``prana.suspend.kind``.

One trace per execution, across processes. The observer is also a
``scheduling.abc.TracePropagator``, so a ``Runner`` opens each execution's ``prana.start``
span as a child of the span current when ``start`` is called (an HTTP request's, say), or
as a new trace's root when there is none, and saves that span's context in the execution
(``WorkflowExecution.trace_context``, W3C ``traceparent``/``tracestate``). Every later
step, run by any runner in any process hours later, is a ``prana.resume`` child of it, in
the same trace; a span current at that moment (the request delivering a webhook) is
linked. A child sub-workflow's ``prana.start`` is a child of its parent's. An execution
saved without a trace context (before tracing was set up, or run without a runner) is
traced as before: its trace id derived from its root execution id (``trace_id_for``),
with the current span linked.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import threading
from typing import TYPE_CHECKING, Any

from prana import Event, EventType
from prana.shell import AROUND_CALL

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from datetime import datetime

    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider

    from prana import ActionContext

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
    return _ns_of(event.at)


def _ns_of(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


class _Opening:
    """A ``prana.start`` span opened by ``begin`` before its run, until the run's
    ``execution_started`` event takes it (and names the execution)."""

    __slots__ = ("execution_id", "owner", "span")

    def __init__(self, owner: TracingObserver, span: Span) -> None:
        self.owner = owner
        self.span = span
        self.execution_id: str | None = None


_OPENING: contextvars.ContextVar[_Opening | None] = contextvars.ContextVar(
    "prana_otel_opening", default=None
)
_RESUMING: contextvars.ContextVar[tuple[SpanContext | None] | None] = contextvars.ContextVar(
    "prana_otel_resuming", default=None
)
"""Inside ``resume``: the caller's span context (to link), in a 1-tuple; ``None`` outside."""


class TracingObserver:
    """An observer that turns a run's events into OpenTelemetry spans (see the module doc)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.tracer: Tracer = trace.get_tracer("prana", tracer_provider=tracer_provider)
        self._lock = threading.Lock()
        self._steps: dict[str, Span] = {}
        self._attempts: dict[tuple[str, str, int], Span] = {}
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._w3c = TraceContextTextMapPropagator()

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

    # -- the trace an execution keeps (scheduling.abc.TracePropagator) ------------------------

    @contextlib.contextmanager
    def begin(self, at: datetime) -> Iterator[dict[str, str] | None]:
        """Open a new execution's ``prana.start`` span under the current span (or as a root);
        yield its W3C context to store in the execution, with the span current meanwhile."""
        from opentelemetry import context

        trace = self._trace
        span = self.tracer.start_span("prana.start", start_time=_ns_of(at))
        current = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        self._w3c.inject(carrier, context=current)
        opening = _Opening(self, span)
        opening_token = _OPENING.set(opening)
        around_token = AROUND_CALL.set(self._attempt_current)
        token = context.attach(current)
        try:
            yield carrier or None
        except BaseException as exc:
            self._abandon(opening, f"the start raised {type(exc).__name__}: {exc}")
            raise
        finally:
            context.detach(token)
            AROUND_CALL.reset(around_token)
            _OPENING.reset(opening_token)
        if opening.execution_id is None:  # refused before the run began
            self._abandon(opening, "the start was refused before its run began")

    def _abandon(self, opening: _Opening, why: str) -> None:
        """End a start's span that its run will not end (it never began, or raised)."""
        span = opening.span
        if opening.execution_id is not None:
            with self._lock:
                if self._steps.get(opening.execution_id) is not span:
                    return  # the run ended it already
                del self._steps[opening.execution_id]
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, why))
        span.end()

    @contextlib.contextmanager
    def resume(self, trace_context: Mapping[str, str] | None) -> Iterator[None]:
        """Make a stored trace context current while a step of its execution runs.

        Nothing stored, or nothing readable: the current context stays, and the step is
        traced as an execution without one (see the module doc).
        """
        from opentelemetry import context

        trace = self._trace
        around_token = AROUND_CALL.set(self._attempt_current)
        try:
            restored = self._w3c.extract(dict(trace_context)) if trace_context else None
            if restored is None or not trace.get_current_span(restored).get_span_context().is_valid:
                yield
                return
            caller = trace.get_current_span().get_span_context()
            resuming_token = _RESUMING.set((caller if caller.is_valid else None,))
            token = context.attach(restored)
            try:
                yield
            finally:
                context.detach(token)
                _RESUMING.reset(resuming_token)
        finally:
            AROUND_CALL.reset(around_token)

    @contextlib.contextmanager
    def _attempt_current(self, ctx: ActionContext) -> Iterator[None]:
        """Make the attempt's span current while its action runs (``AROUND_CALL``)."""
        from opentelemetry import context

        with self._lock:
            span = self._attempts.get((ctx.execution_id, ctx.node_key, ctx.run_index))
        if span is None:
            yield
            return
        token = context.attach(self._trace.set_span_in_context(span))
        try:
            yield
        finally:
            context.detach(token)

    # -- events --------------------------------------------------------------------------------

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
        attributes = self._common(event)
        if event.kind is not None:
            attributes["prana.resume.kind"] = event.kind
        opening = _OPENING.get() if event.type is EventType.EXECUTION_STARTED else None
        if opening is not None and opening.owner is self and opening.execution_id is None:
            opening.execution_id = event.execution_id  # the span ``begin`` opened for this run
            span = opening.span
            span.set_attributes(attributes)
        else:
            name = "prana.start" if event.type is EventType.EXECUTION_STARTED else "prana.resume"
            trace = self._trace
            resuming = _RESUMING.get()
            current = trace.get_current_span().get_span_context()
            if resuming is not None:  # inside the execution's own stored context
                context = None
                caller = resuming[0]
            else:
                context = self._execution_context(event.execution_id)
                caller = current if current.is_valid else None
            links = [trace.Link(caller)] if caller is not None else []
            span = self.tracer.start_span(
                name,
                context=context,
                attributes=attributes,
                links=links,
                start_time=_ns(event),
            )
        with self._lock:
            old = self._steps.pop(event.execution_id, None)
            self._steps[event.execution_id] = span
            self._trim(self._steps)
        if old is not None and old is not span:
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
                name = (
                    error.type
                    if error.module in ("builtins", "")
                    else (f"{error.module}.{error.type}")
                )
                span.set_attribute("error.type", name)
                exception = {"exception.type": name, "exception.message": error.message}
                if error.traceback:
                    exception["exception.stacktrace"] = error.traceback
                span.add_event("exception", exception, timestamp=_ns(event))
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
