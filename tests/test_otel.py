"""Tracing: the core carries an execution's trace context; ``scheduling.otel`` fills it at the
start and makes every later step, in any process, a part of that trace."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from doubles import flaky_registry, sub_node, webhook_node
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prana import (
    Connection,
    ExecutionStatus,
    Failed,
    InvalidSettingsError,
    InvalidWorkflowError,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    Workflow,
    cancel_execution,
    dumps,
    execute_workflow,
    loads,
    redrive_execution,
    resume_workflow,
)
from prana.shell import expire_webhook
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.otel import TracingObserver, trace_id_for
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from opentelemetry.sdk.trace import ReadableSpan

    from scheduling.abc import ExecutionStore


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
    store: ExecutionStore, clock: ManualClock, provider: TracerProvider, registry: Registry
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


# -- the core carries the trace context --------------------------------------------------------

TRACE = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=opaque",
}

WAITING = Workflow(
    id="traced-wait",
    nodes=[
        *WORKFLOW.nodes,
        Node(key="approve", type="wait.wait", params={"mode": "webhook", "timeout_hours": 1}),
    ],
    connections=[*WORKFLOW.connections, Connection(from_node="call", to_node="approve")],
)


def test_the_core_keeps_the_trace_context_through_every_step() -> None:
    """Given at the start, the trace context survives a retry, a wait, an expiry, a redrive,
    a cancel and the JSON round trip, unchanged; the core never reads it."""
    clock = ManualClock()
    registry = flaky_registry(1)
    started = execute_workflow(WAITING, registry=registry, clock=clock, trace_context=TRACE)
    assert isinstance(started, Suspend)
    assert started.execution.trace_context == TRACE
    clock.advance(3)
    waiting = resume_workflow(started.execution, workflow=WAITING, registry=registry, clock=clock)
    assert isinstance(waiting, Suspend)
    assert waiting.kind == "webhook"
    assert waiting.execution.trace_context == TRACE
    assert loads(dumps(waiting.execution)).trace_context == TRACE
    assert cancel_execution(waiting.execution, clock=clock).trace_context == TRACE
    expired = expire_webhook(waiting.execution, workflow=WAITING, registry=registry, clock=clock)
    assert isinstance(expired, Failed)
    assert expired.execution.trace_context == TRACE
    redriven = redrive_execution(expired.execution, workflow=WAITING, clock=clock)
    assert redriven.trace_context == TRACE


def test_a_record_stored_before_trace_contexts_loads_without_one() -> None:
    """A stored execution written without the field reads back with ``trace_context=None``."""
    outcome = execute_workflow(WORKFLOW, registry=flaky_registry(1), clock=ManualClock())
    document = orjson.loads(dumps(outcome.execution))
    del document["execution"]["trace_context"]
    old = loads(orjson.dumps(document))
    assert old.trace_context is None
    assert old == outcome.execution


@pytest.mark.parametrize(
    "bad",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        {"traceparent": 7},
        {"traceparent": "x" * 1025},
        {f"h{n}": "v" for n in range(9)},
    ],
)
def test_a_bad_trace_context_is_refused_at_the_start(bad: Any) -> None:
    """Anything but a few short string headers is a clear error naming ``trace_context``."""
    with pytest.raises(InvalidSettingsError, match="trace_context"):
        execute_workflow(WORKFLOW, registry=flaky_registry(0), trace_context=bad)


# -- scheduling.otel: one trace per execution -----------------------------------------------------


def _one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def _ids(span: ReadableSpan) -> tuple[int, int, int | None]:
    """``(trace id, span id, parent span id)`` of a finished span."""
    assert span.context is not None
    return span.context.trace_id, span.context.span_id, span.parent.span_id if span.parent else None


def _stored_parent(store: ExecutionStore, execution_id: str) -> tuple[int, int]:
    """The trace id and parent span id of the ``traceparent`` stored with the execution."""
    execution, _ = store.load(execution_id)
    assert execution.trace_context is not None
    version, trace_id, span_id, flags = execution.trace_context["traceparent"].split("-")
    assert version == "00"
    assert int(flags, 16) & 1  # sampled
    return int(trace_id, 16), int(span_id, 16)


def test_a_retry_resumed_by_another_runner_lands_in_the_callers_trace(tmp_path: Path) -> None:
    """Started inside a request's span, the execution keeps that trace: ``prana.start`` is
    the request's child, its context is stored, and a second runner (another tracer
    provider) over the same SQLite file resumes the retry as ``prana.resume`` under it."""
    store = SQLiteStore(tmp_path / "traced.db")
    clock = ManualClock()
    first_provider, first_spans = _provider()
    second_provider, second_spans = _provider()
    registry = flaky_registry(1)  # one flaky service, seen by both runners
    request_tracer = first_provider.get_tracer("app")
    with (
        _runner(store, clock, first_provider, registry) as first,
        request_tracer.start_as_current_span("POST /orders") as request,
    ):
        execution_id = first.start(WORKFLOW, None)
    caller = request.get_span_context()
    start = _one(first_spans.get_finished_spans(), "prana.start")
    assert _ids(start) == (caller.trace_id, _ids(start)[1], caller.span_id)
    assert _stored_parent(store, execution_id) == (caller.trace_id, _ids(start)[1])

    clock.advance(3)
    with _runner(SQLiteStore(tmp_path / "traced.db"), clock, second_provider, registry) as r:
        r.run_due()  # "hours later, elsewhere"
        assert r.get(execution_id).status is ExecutionStatus.COMPLETED
    after = second_spans.get_finished_spans()
    resume = _one(after, "prana.resume")
    assert _ids(resume)[0] == caller.trace_id
    assert _ids(resume)[2] == _ids(start)[1]
    assert not resume.links  # no span was current in the second runner
    for span in (*first_spans.get_finished_spans(), *after):
        assert _ids(span)[0] == caller.trace_id

    (failed,) = _attempts(first_spans.get_finished_spans(), "call")
    assert _ids(failed)[2] == _ids(start)[1]
    attributes = dict(failed.attributes or {})
    assert attributes["prana.attempt"] == 1
    assert attributes["prana.outcome"] == "retry_scheduled"
    assert attributes["prana.retry.delay_ms"] == 3000
    assert attributes["prana.retry.next_attempt"] == 2
    assert attributes["prana.max_attempts"] == 3
    assert attributes["prana.error.type"] == "ConnectionError"
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert dict(start.attributes or {})["prana.execution_id"] == execution_id

    (retried,) = _attempts(after, "call")
    assert dict(retried.attributes or {})["prana.attempt"] == 2
    assert dict(retried.attributes or {})["prana.outcome"] == "completed"
    assert _ids(retried)[2] == _ids(resume)[1]
    assert dict(resume.attributes or {})["prana.outcome"] == "completed"


_RESUME_ELSEWHERE = """
import json, sys
from datetime import datetime
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prana import Registry
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.otel import TracingObserver
from scheduling.stores.sqlite import SQLiteStore

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
registry = Registry()
registry.register("test.flaky", lambda params, ctx: {"ok": True})
clock = ManualClock(datetime.fromisoformat(sys.argv[2]))
runner = Runner(registry=registry, store=SQLiteStore(sys.argv[1]),
                scheduler=ManualScheduler(clock=clock), observers=[TracingObserver(provider)])
with runner:
    runner.run_due()
print(json.dumps([[s.name, s.context.trace_id, s.parent.span_id if s.parent else None]
                  for s in exporter.get_finished_spans()]))
"""


def test_a_retry_resumed_by_another_process_lands_in_the_callers_trace(tmp_path: Path) -> None:
    """The same through a second Python process: its spans join the caller's trace."""
    store = SQLiteStore(tmp_path / "traced.db")
    clock = ManualClock()
    provider, spans = _provider()
    with (
        _runner(store, clock, provider, flaky_registry(1)) as runner,
        provider.get_tracer("app").start_as_current_span("POST /orders") as request,
    ):
        execution_id = runner.start(WORKFLOW, None)
    start = _one(spans.get_finished_spans(), "prana.start")
    clock.advance(3)
    done = subprocess.run(
        [sys.executable, "-c", _RESUME_ELSEWHERE, str(tmp_path / "traced.db"), clock().isoformat()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    elsewhere = {name: (trace_id, parent) for name, trace_id, parent in json.loads(done.stdout)}
    assert elsewhere["prana.resume"] == (request.get_span_context().trace_id, _ids(start)[1])
    assert elsewhere["prana.attempt"][0] == request.get_span_context().trace_id
    assert store.load(execution_id)[0].status is ExecutionStatus.COMPLETED


def test_the_execution_view_shows_the_trace_to_look_up() -> None:
    """The web view's JSON carries the stored ``traceparent``, so an operator can find the trace."""
    from scheduling.web._views import execution_view

    provider, _ = _provider()
    with _runner(MemoryStore(), ManualClock(), provider, flaky_registry(1)) as runner:
        execution_id = runner.start(WORKFLOW, None)
        execution, version = runner.store.load(execution_id)
        view = execution_view(execution, version, WORKFLOW, runner.registry)
    assert execution.trace_context is not None
    assert view["trace_context"] == {"traceparent": execution.trace_context["traceparent"]}


def test_a_start_with_no_current_span_roots_a_new_trace() -> None:
    """With no caller span, ``prana.start`` is a new trace's root and later steps its children."""
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    provider, exporter = _provider()
    scheduler = ManualScheduler(clock=clock)
    with Runner(
        flaky_registry(1), store, scheduler, observers=[TracingObserver(provider)]
    ) as runner:
        execution_id = runner.start(WORKFLOW, None)
        start = _one(exporter.get_finished_spans(), "prana.start")
        assert start.parent is None
        assert _stored_parent(store, execution_id) == _ids(start)[:2]
        scheduler.advance(3)
    resume = _one(exporter.get_finished_spans(), "prana.resume")
    assert _ids(resume)[::2] == _ids(start)[:2]


def test_a_webhook_delivered_inside_a_request_span_links_to_it() -> None:
    """A delivery made while another span is current (the webhook's HTTP request) resumes in
    the execution's own trace and links that span."""
    provider, exporter = _provider()
    tracer = provider.get_tracer("app")
    with _runner(MemoryStore(), ManualClock(), provider, flaky_registry(0)) as runner:
        execution_id = runner.start(
            Workflow(
                id="hook",
                nodes=[Node(key="start", type="manual.trigger"), webhook_node()],
                connections=[Connection(from_node="start", to_node="w")],
            ),
            None,
        )
        with tracer.start_as_current_span("POST /hooks/...") as request:
            runner.deliver(execution_id, {"ok": True})
    finished = exporter.get_finished_spans()
    start, resume = _one(finished, "prana.start"), _one(finished, "prana.resume")
    assert _ids(resume)[::2] == _ids(start)[:2]
    assert _ids(resume)[0] != request.get_span_context().trace_id
    assert [link.context.span_id for link in resume.links] == [request.get_span_context().span_id]


def test_a_sub_workflow_runs_in_its_parents_trace() -> None:
    """A child sub-workflow's ``prana.start`` is a child of its parent's: one trace."""
    provider, exporter = _provider()
    child = Workflow(id="child", nodes=[Node(key="start", type="manual.trigger")], connections=[])
    parent = Workflow(
        id="parent",
        nodes=[Node(key="start", type="manual.trigger"), sub_node("child", "sync")],
        connections=[Connection(from_node="start", to_node="sub")],
    )
    with _runner(MemoryStore(), ManualClock(), provider, flaky_registry(0)) as runner:
        runner.register_workflow(child)
        execution_id = runner.start(parent, None)
        assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
    starts = {
        dict(s.attributes or {})["prana.workflow_id"]: s
        for s in exporter.get_finished_spans()
        if s.name == "prana.start"
    }
    assert _ids(starts["child"])[::2] == _ids(starts["parent"])[:2]


def test_an_execution_saved_without_a_trace_context_keeps_the_derived_trace() -> None:
    """A record from before tracing (or from a runner without it) resumes in the trace
    derived from its id, as it always did, linking the span current then."""
    store = MemoryStore(serialize=True)
    clock = ManualClock()
    with Runner(
        registry=flaky_registry(1), store=store, scheduler=ManualScheduler(clock=clock)
    ) as r:
        execution_id = r.start(WORKFLOW, None)
    assert store.load(execution_id)[0].trace_context is None
    provider, exporter = _provider()
    clock.advance(3)
    with (
        _runner(store, clock, provider, flaky_registry(0)) as runner,
        provider.get_tracer("app").start_as_current_span("worker tick") as tick,
    ):
        runner.run_due()
    resume = _one(exporter.get_finished_spans(), "prana.resume")
    assert _ids(resume)[0] == trace_id_for(execution_id)
    assert [link.context.span_id for link in resume.links] == [tick.get_span_context().span_id]


def test_a_start_span_is_taken_only_by_the_observer_that_opened_it() -> None:
    """Two tracing observers, in any order: each ends one ``prana.start`` of its own; the one
    whose ``begin`` opened the start keeps that span (and its context is what is stored)."""
    first, first_spans = _provider()
    second, second_spans = _provider()
    opener, other = TracingObserver(first), TracingObserver(second)
    with opener.begin(ManualClock()()) as trace_context:
        outcome = execute_workflow(
            WORKFLOW,
            registry=flaky_registry(0),
            observers=[other, opener],
            trace_context=trace_context,
        )
    mine = _one(first_spans.get_finished_spans(), "prana.start")
    theirs = _one(second_spans.get_finished_spans(), "prana.start")
    assert _ids(mine)[1] != _ids(theirs)[1]
    assert outcome.execution is not None
    assert outcome.execution.trace_context == trace_context
    assert trace_context is not None
    assert trace_context["traceparent"].split("-")[2] == f"{_ids(mine)[1]:016x}"


def test_a_start_that_is_refused_ends_its_span_with_an_error() -> None:
    """A start refused before its run (bad input) leaves no open span behind."""
    provider, exporter = _provider()
    with (
        _runner(MemoryStore(), ManualClock(), provider, flaky_registry(0)) as runner,
        pytest.raises(InvalidWorkflowError),
    ):
        runner.start(WORKFLOW, {"not": {"json": object()}})
    (start,) = exporter.get_finished_spans()
    assert start.name == "prana.start"
    assert start.status.status_code is trace.StatusCode.ERROR


def test_tracing_observer_needs_only_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an SDK the observer works on the API's no-op tracer."""
    observer = TracingObserver()
    runner = Runner(
        registry=flaky_registry(0),
        store=MemoryStore(),
        scheduler=ManualScheduler(clock=ManualClock()),
        observers=[observer],
    )
    with runner:
        execution_id = runner.start(WORKFLOW, None)
    assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
    assert runner.get(execution_id).trace_context is None  # no SDK: nothing worth storing


# -- the attempt's span is current while the action runs ---------------------------------------


def _inner_action(provider: TracerProvider, kind: str) -> Any:
    """An action that opens its own span (as httpx or psycopg instrumentation would)."""
    tracer = provider.get_tracer("app")

    def sync(params: Any, ctx: Any) -> Any:
        with tracer.start_as_current_span("inner"):
            return {"ok": True}

    async def run_async(params: Any, ctx: Any) -> Any:
        import asyncio

        await asyncio.sleep(0)
        with tracer.start_as_current_span("inner"):
            await asyncio.sleep(0)
            return {"ok": True}

    return run_async if kind == "async" else sync


@pytest.mark.parametrize(
    ("kind", "timeout"), [("sync", None), ("sync", 30), ("async", None), ("async", 30)]
)
def test_a_span_opened_inside_an_action_is_the_attempts_child(kind: str, timeout: Any) -> None:
    """``prana.attempt`` is the current span while the action runs, in a worker thread (a
    timeout) or on an event loop too: a span the action opens is its child, not
    ``prana.start``'s."""
    provider, spans = _provider()
    registry = Registry()
    registry.register("test.inner", _inner_action(provider, kind))
    wf = Workflow(
        id="inner",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="call", type="test.inner", settings=NodeSettings(timeout=timeout)),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )
    clock = ManualClock()
    with _runner(MemoryStore(), clock, provider, registry) as runner:
        execution_id = runner.start(wf, None)
        assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
    finished = spans.get_finished_spans()
    (attempt,) = _attempts(finished, "call")
    inner = _one(finished, "inner")
    assert _ids(inner)[2] == _ids(attempt)[1]
    assert _ids(inner)[0] == _ids(attempt)[0]


def test_a_span_opened_inside_an_awaited_action_is_the_attempts_child() -> None:
    """Driven by ``aexecute_workflow`` inside the tracer's ``begin`` (by hand, no runner)."""
    import asyncio

    from prana import aexecute_workflow

    provider, spans = _provider()
    registry = Registry()
    registry.register("test.inner", _inner_action(provider, "async"))
    wf = Workflow(
        id="inner",
        nodes=[Node(key="start", type="manual.trigger"), Node(key="call", type="test.inner")],
        connections=[Connection(from_node="start", to_node="call")],
    )
    tracer = TracingObserver(provider)
    clock = ManualClock()

    async def main() -> Any:
        with tracer.begin(clock()) as trace_context:
            return await aexecute_workflow(
                wf, registry=registry, clock=clock, observers=[tracer], trace_context=trace_context
            )

    outcome = asyncio.run(main())
    assert outcome.execution.status is ExecutionStatus.COMPLETED
    finished = spans.get_finished_spans()
    (attempt,) = _attempts(finished, "call")
    assert _ids(_one(finished, "inner"))[2] == _ids(attempt)[1]


def test_a_failed_attempt_records_an_exception_event() -> None:
    """The semantic conventions' ``exception`` event (type, message, stacktrace: the
    recorded traceback) and ``error.type`` on the failed attempt's span."""
    provider, spans = _provider()
    registry = Registry()

    def lookup(params: Any, ctx: Any) -> Any:
        order: dict[str, Any] = {}
        return order["address"]

    registry.register("test.lookup", lookup)
    wf = Workflow(
        id="failing",
        nodes=[Node(key="start", type="manual.trigger"), Node(key="call", type="test.lookup")],
        connections=[Connection(from_node="start", to_node="call")],
    )
    with _runner(MemoryStore(), ManualClock(), provider, registry) as runner:
        execution_id = runner.start(wf, None)
        recorded = runner.get(execution_id).error
    assert recorded is not None
    assert recorded.traceback is not None
    (attempt,) = _attempts(spans.get_finished_spans(), "call")
    attributes = dict(attempt.attributes or {})
    assert attributes["error.type"] == "KeyError"
    (event,) = [e for e in attempt.events if e.name == "exception"]
    assert dict(event.attributes or {}) == {
        "exception.type": "KeyError",
        "exception.message": "'address'",
        "exception.stacktrace": recorded.traceback,
    }
    assert ", in lookup\nKeyError: 'address'" in recorded.traceback
