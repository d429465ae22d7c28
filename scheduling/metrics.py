"""Prometheus metrics for runs: counters and histograms from events, counts from the store.

Install with ``pip install 'prana-workflows[metrics]'`` (``prometheus_client``). Add the
observer to a runner; the web app (``scheduling.web.create_app``) serves ``GET /metrics``
behind the operator credential when the runner has one::

    from scheduling.metrics import MetricsObserver
    runner = Runner(registry, store, observers=[MetricsObserver()])

From this process's events (since it started):

- ``prana_attempts_total{workflow, outcome}``: attempts ended, by outcome (``completed``,
  ``failed``, ``retry_scheduled``, ``suspended``);
- ``prana_retries_scheduled_total{workflow}``: retries scheduled;
- ``prana_attempt_duration_seconds{workflow}``: a histogram of attempts' durations (their
  events' times, the runner's clock);
- ``prana_alarm_lateness_seconds{workflow}``: a histogram of how late a retry's attempt
  started after it was due (a retry scheduled in this process).

From the store, read at each scrape (at most ``MAX_ROWS`` rows):

- ``prana_executions{workflow, status}``: stored executions by workflow and status;
- ``prana_pauses_pending{kind}``: suspended executions by what they wait on (``retry``,
  ``timer``, ``webhook``, ``sub_workflow``...).
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any

from prana import Event, EventType, ExecutionStatus, RecordError
from scheduling._errors import ExecutionNotFound, UnreadableRowsError
from scheduling.abc import UnreadableRow

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from scheduling.abc import ExecutionStore, ExecutionSummary

__all__ = ["MAX_ROWS", "MetricsObserver", "metrics_text"]

MAX_ROWS = 100_000
"""The most stored executions one scrape counts (and suspended ones it reads)."""

_ENDS = {
    EventType.NODE_COMPLETED: "completed",
    EventType.NODE_FAILED: "failed",
    EventType.NODE_RETRY_SCHEDULED: "retry_scheduled",
    EventType.NODE_SUSPENDED: "suspended",
}
_MAX_OPEN = 10_000
"""Attempts started but not ended (a crash) are forgotten past this many."""
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""The histograms' buckets, in seconds."""


class MetricsObserver:
    """An observer counting a run's events as Prometheus metrics (see the module doc)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        """This observer's own registry (never the global one): ``metrics_text`` adds the
        store's counts to it at each scrape."""
        self.attempts = Counter(
            "prana_attempts", "Attempts ended, by outcome.", ["workflow", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.retries = Counter(
            "prana_retries_scheduled", "Retries scheduled.", ["workflow"], registry=self.registry
        )
        self.duration = Histogram(
            "prana_attempt_duration_seconds", "Attempts' durations.", ["workflow"],
            buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.lateness = Histogram(
            "prana_alarm_lateness_seconds", "How late a retry's attempt started after it was due.",
            ["workflow"], buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._started: collections.OrderedDict[tuple[str, str, int], datetime] = (
            collections.OrderedDict()
        )
        self._due: collections.OrderedDict[tuple[str, str, int], datetime] = (
            collections.OrderedDict()
        )

    def __repr__(self) -> str:
        return "<MetricsObserver>"

    def __call__(self, event: Event) -> None:
        kind = event.type
        if event.node_key is None:
            return
        key = (event.execution_id, event.node_key, event.run_index or 0)
        workflow = event.workflow_id
        if kind is EventType.NODE_STARTED:
            with self._lock:
                self._started[key] = event.at
                due = self._due.pop(key, None)
                _trim(self._started)
            if due is not None:
                self.lateness.labels(workflow).observe(max(0.0, (event.at - due).total_seconds()))
            return
        outcome = _ENDS.get(kind)
        if outcome is None:
            return
        self.attempts.labels(workflow, outcome).inc()
        with self._lock:
            started = self._started.pop(key, None)
            if kind is EventType.NODE_RETRY_SCHEDULED and event.delay_ms is not None:
                from datetime import timedelta

                self._due[key] = event.at + timedelta(milliseconds=event.delay_ms)
                _trim(self._due)
        if kind is EventType.NODE_RETRY_SCHEDULED:
            self.retries.labels(workflow).inc()
        if started is not None:
            self.duration.labels(workflow).observe(max(0.0, (event.at - started).total_seconds()))


def _trim(kept: collections.OrderedDict[Any, Any]) -> None:
    while len(kept) > _MAX_OPEN:
        kept.popitem(last=False)


class _StoreCounts:
    """A collector: the store's executions by workflow and status, pauses by kind."""

    def __init__(self, store: ExecutionStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        executions = GaugeMetricFamily(
            "prana_executions", "Stored executions.", labels=["workflow", "status"]
        )
        pauses = GaugeMetricFamily(
            "prana_pauses_pending", "Suspended executions by what they wait on.", labels=["kind"]
        )
        rows: list[ExecutionSummary | UnreadableRow]
        try:
            rows = list(self.store.list(None, limit=MAX_ROWS))
        except UnreadableRowsError as exc:
            rows = list(exc.rows)
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        kinds: collections.Counter[str] = collections.Counter()
        for row in rows:
            if isinstance(row, UnreadableRow):
                counts["", "unreadable"] += 1
                continue
            counts[row.workflow_id, row.status.value] += 1
            if row.status is ExecutionStatus.SUSPENDED:
                try:
                    execution, _ = self.store.load(row.id)
                except (ExecutionNotFound, RecordError):
                    continue
                if execution.suspension is not None:
                    kinds[execution.suspension.kind] += 1
        for (workflow, status), n in sorted(counts.items()):
            executions.add_metric([workflow, status], n)
        for kind, n in sorted(kinds.items()):
            pauses.add_metric([kind], n)
        yield executions
        yield pauses


def metrics_text(store: ExecutionStore, observer: MetricsObserver | None = None) -> bytes:
    """The Prometheus text exposition: the store's counts, and ``observer``'s metrics."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCounts(store))
    text = generate_latest(registry)
    if observer is not None:
        text += generate_latest(observer.registry)
    return text
