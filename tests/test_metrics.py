"""``GET /metrics``: the Prometheus text format, parsed by prometheus_client's own parser,
its counts checked against the store after a scripted run."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from doubles import Flaky, raising
from servers import serve

from prana import Connection, ExecutionStatus, Node, NodeSettings, Registry, RetryPolicy, Workflow
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore
from scheduling.web import create_app

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from scheduling.metrics import MetricsObserver  # noqa: E402

TOKEN = "an-operator-token-long-enough"


def _workflow(
    wid: str, action: str, *, retry: RetryPolicy | None = None, wait: bool = False
) -> Workflow:
    nodes = [
        Node(key="start", type="manual.trigger"),
        Node(key="work", type=action, settings=NodeSettings(retry=retry)),
    ]
    connections = [Connection(from_node="start", to_node="work")]
    if wait:
        nodes.append(Node(key="approve", type="wait.wait", params={"mode": "webhook"}))
        connections.append(Connection(from_node="work", to_node="approve"))
    return Workflow(id=wid, nodes=nodes, connections=connections)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_metrics_parse_and_match_the_store() -> None:
    registry = Registry()
    registry.register("test.ok", Flaky(0))
    registry.register("test.flaky", Flaky(1))
    registry.register("test.boom", raising(KeyError("zip")))
    clock = ManualClock()
    retry = RetryPolicy(max_attempts=3, backoff="constant", initial_delay=5)
    metrics = MetricsObserver()
    store = MemoryStore()
    with Runner(
        registry=registry, store=store, scheduler=ManualScheduler(clock=clock), observers=[metrics]
    ) as runner:
        done = [runner.start(_workflow("ok", "test.ok"), None) for _ in range(2)]
        failed = runner.start(_workflow("boom", "test.boom"), None)
        waiting = runner.start(_workflow("wait", "test.ok", wait=True), None)
        retried = runner.start(_workflow("flaky", "test.flaky", retry=retry), None)
        clock.advance(7)  # the retry was due at +5 s: it starts 2 s late
        runner.run_due()
        with serve(create_app(runner, token=TOKEN)) as url:
            refused = httpx.get(f"{url}/metrics")
            answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        statuses = {eid: runner.get(eid).status for eid in [*done, failed, waiting, retried]}
    assert refused.status_code == 401
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = _samples(answer.text)

    def count(name: str, **labels: str) -> Any:
        return found.get((name, tuple(sorted(labels.items()))), 0)

    assert statuses[failed] is ExecutionStatus.FAILED
    assert statuses[retried] is ExecutionStatus.COMPLETED
    assert count("prana_executions", workflow="ok", status="completed") == 2
    assert count("prana_executions", workflow="boom", status="failed") == 1
    assert count("prana_executions", workflow="wait", status="suspended") == 1
    assert count("prana_executions", workflow="flaky", status="completed") == 1
    assert count("prana_pauses_pending", kind="webhook") == 1
    # attempts: each trigger and work node, the flaky work twice; the wait suspends
    assert count("prana_attempts_total", workflow="ok", outcome="completed") == 4
    assert count("prana_attempts_total", workflow="boom", outcome="failed") == 1
    assert count("prana_attempts_total", workflow="flaky", outcome="retry_scheduled") == 1
    assert count("prana_attempts_total", workflow="flaky", outcome="completed") == 2
    assert count("prana_attempts_total", workflow="wait", outcome="suspended") == 1
    assert count("prana_retries_scheduled_total", workflow="flaky") == 1
    assert count("prana_alarm_lateness_seconds_count", workflow="flaky") == 1
    assert count("prana_alarm_lateness_seconds_sum", workflow="flaky") == 2.0
    assert count("prana_attempt_duration_seconds_count", workflow="flaky") == 3
