"""OpenTelemetry: a span per attempt and per step, one trace per execution across processes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prana import Connection, ExecutionStatus, Node, NodeSettings, Registry, RetryPolicy, Workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.otel import TracingObserver, trace_id_for
from scheduling.stores.memory import MemoryStore

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


def _registry(fails: int) -> Registry:
    registry = Registry()
    calls = {"n": 0}

    def flaky(params: Any, ctx: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= fails:
            raise ConnectionError(f"down {calls['n']}")
        return {"ok": True}

    registry.register("test.flaky", flaky)
    return registry


WORKFLOW = Workflow(
    id="traced",
    nodes=[
        Node(key="start", type="manual.trigger"),
        Node(
            key="call",
            type="test.flaky",
            settings=NodeSettings(retry=RetryPolicy(max_attempts=3, initial_delay=3)),
        ),
    ],
    connections=[Connection(from_node="start", to_node="call")],
)


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _runner(
    store: MemoryStore, clock: ManualClock, provider: TracerProvider, registry: Registry
) -> Runner:
    return Runner(
        registry=registry,
        store=store,
        scheduler=ManualScheduler(clock=clock),
        observers=[TracingObserver(provider)],
    )


def _attempts(spans: tuple[ReadableSpan, ...], node: str) -> list[ReadableSpan]:
    return [
        s
        for s in spans
        if s.name == "prana.attempt"
        and s.attributes is not None
        and s.attributes.get("prana.node_key") == node
    ]


def test_a_retry_resumed_by_another_process_joins_the_same_trace() -> None:
    """Start in one runner, resume the retry in another: one trace, spans with retry data."""
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    first_provider, first_spans = _provider()
    second_provider, second_spans = _provider()
    registry = _registry(1)  # one flaky service, seen by both processes
    with _runner(store, clock, first_provider, registry) as first:
        execution_id = first.start(WORKFLOW, None)
    assert first.get(execution_id).status is ExecutionStatus.SUSPENDED
    clock.advance(3)
    with _runner(store, clock, second_provider, registry) as second:  # "hours later, elsewhere"
        second.run_due()
        assert second.get(execution_id).status is ExecutionStatus.COMPLETED
    before = first_spans.get_finished_spans()
    after = second_spans.get_finished_spans()
    assert [s.name for s in before if s.name != "prana.attempt"] == ["prana.start"]
    assert [s.name for s in after if s.name != "prana.attempt"] == ["prana.resume"]
    expected = trace_id_for(execution_id)
    for span in (*before, *after):
        assert span.context is not None
        assert span.context.trace_id == expected

    (failed,) = _attempts(before, "call")
    attributes = dict(failed.attributes or {})
    assert attributes["prana.attempt"] == 1
    assert attributes["prana.outcome"] == "retry_scheduled"
    assert attributes["prana.retry.delay_ms"] == 3000
    assert attributes["prana.retry.next_attempt"] == 2
    assert attributes["prana.max_attempts"] == 3
    assert attributes["prana.error.type"] == "ConnectionError"
    assert failed.status.status_code is trace.StatusCode.ERROR

    (retried,) = _attempts(after, "call")
    assert dict(retried.attributes or {})["prana.attempt"] == 2
    assert dict(retried.attributes or {})["prana.outcome"] == "completed"
    resume = next(s for s in after if s.name == "prana.resume")
    assert retried.parent is not None
    assert resume.context is not None
    assert retried.parent.span_id == resume.context.span_id
    assert dict(resume.attributes or {})["prana.outcome"] == "completed"


def test_a_start_inside_a_span_links_to_it() -> None:
    """Starting from inside an active span (a request) links the start step to it."""
    provider, exporter = _provider()
    tracer = provider.get_tracer("app")
    with (
        _runner(MemoryStore(), ManualClock(), provider, _registry(1)) as runner,
        tracer.start_as_current_span("POST /orders") as request,
    ):
        runner.start(WORKFLOW, None)
    start = next(s for s in exporter.get_finished_spans() if s.name == "prana.start")
    assert [link.context.span_id for link in start.links] == [request.get_span_context().span_id]


def test_tracing_observer_needs_only_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an SDK the observer works on the API's no-op tracer."""
    observer = TracingObserver()
    runner = Runner(
        registry=_registry(0),
        store=MemoryStore(),
        scheduler=ManualScheduler(clock=ManualClock()),
        observers=[observer],
    )
    with runner:
        execution_id = runner.start(WORKFLOW, None)
    assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
