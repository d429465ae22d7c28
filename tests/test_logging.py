"""Logging: named loggers with a NullHandler, one line per meaningful event, loud observers."""

from __future__ import annotations

import logging

import pytest
from doubles import Harness, flaky_node, flaky_registry, workflow

from prana import (
    Completed,
    Connection,
    Event,
    ExecutionStatus,
    Node,
    NodeSettings,
    RetryPolicy,
    Workflow,
    WorkflowExecution,
    execute_workflow,
)
from prana.testing import ManualClock
from scheduling import Runner, StoreError
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore


def _workflow(max_attempts: int = 2) -> Workflow:
    return Workflow(
        id="logged",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="call",
                type="test.flaky",
                settings=NodeSettings(
                    retry=RetryPolicy(max_attempts=max_attempts, initial_delay=2)
                ),
            ),
        ],
        connections=[Connection(from_node="start", to_node="call")],
    )


def test_library_loggers_have_a_null_handler() -> None:
    """``prana`` and ``scheduling`` never print on their own."""
    import scheduling  # noqa: F401 - importing installs the handler

    for name in ("prana", "scheduling"):
        handlers = logging.getLogger(name).handlers
        assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_an_observer_that_raises_is_logged_at_error(caplog: pytest.LogCaptureFixture) -> None:
    """The run goes on; the observer's exception is logged with its traceback."""

    def broken(event: Event) -> None:
        raise RuntimeError("observer bug")

    seen: list[str] = []
    with caplog.at_level(logging.ERROR, logger="prana.events"):
        outcome = execute_workflow(
            _workflow(),
            registry=flaky_registry(0),
            observers=[broken, lambda e: seen.append(e.name)],
        )
    assert isinstance(outcome, Completed)
    assert "execution_completed" in seen  # the next observer still ran
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert errors[0].exc_info is not None
    assert "observer bug" in caplog.text
    assert errors[0].prana_event == "execution_started"  # type: ignore[attr-defined]


def test_runner_logs_retries_and_failures_with_fields(caplog: pytest.LogCaptureFixture) -> None:
    """A retry at INFO, the exhausted retry and the failed execution at WARNING, fields in extra."""
    clock = ManualClock()
    runner = Runner(
        registry=flaky_registry(5),
        store=MemoryStore(),
        scheduler=ManualScheduler(clock=clock),
    )
    with caplog.at_level(logging.INFO, logger="scheduling.events"), runner:
        execution_id = runner.start(_workflow(max_attempts=2), None)
        scheduler = runner.scheduler
        assert isinstance(scheduler, ManualScheduler)
        scheduler.advance(2)
    assert runner.get(execution_id).status is ExecutionStatus.FAILED
    records = [r for r in caplog.records if r.name == "scheduling.events"]
    by_event = {r.prana_event: r for r in records}  # type: ignore[attr-defined]
    retry = by_event["node_retry_scheduled"]
    assert retry.levelno == logging.INFO
    assert retry.execution_id == execution_id  # type: ignore[attr-defined]
    assert retry.node_key == "call"  # type: ignore[attr-defined]
    assert retry.attempt == 2  # type: ignore[attr-defined]
    assert retry.delay_ms == 2000  # type: ignore[attr-defined]
    assert retry.error_type == "ConnectionError"  # type: ignore[attr-defined]
    assert "retrying in 2.0s" in retry.getMessage()  # format_duration, as the console
    assert by_event["node_retry_exhausted"].levelno == logging.INFO
    assert by_event["node_failed"].levelno == logging.INFO
    assert by_event["execution_failed"].levelno == logging.WARNING
    warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert warnings == [
        f"execution {execution_id} of logged failed at node call: ConnectionError: down"
    ]  # one WARNING per failed execution
    assert by_event["execution_started"].levelno == logging.INFO
    assert "node_started" not in by_event  # DEBUG, below the captured level
    assert len([r for r in records if r.prana_event == "node_retry_scheduled"]) == 1  # type: ignore[attr-defined]


class _FailingStore(MemoryStore):
    """A memory store whose reads fail with ``StoreError`` while ``failing`` (a full disk)."""

    failing = False

    def load(self, execution_id: str) -> tuple[WorkflowExecution, int]:
        if self.failing:
            raise StoreError("database or disk is full")
        return super().load(execution_id)


def test_a_failing_store_is_logged_once_per_change_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Alarms that fail because the store does are not one ERROR each, at every poll (954
    lines in 21 s): the store failing is one ERROR, its working again one WARNING with the
    count; the alarms stay due and complete once it works."""
    store = _FailingStore()
    h = Harness(store, fails=3)
    with h.runner:
        ids = [h.runner.start(workflow(flaky_node()), execution_id=f"e{n}") for n in range(3)]
        assert all(h.runner.get(eid).status is ExecutionStatus.SUSPENDED for eid in ids)
        store.failing = True
        with caplog.at_level(logging.DEBUG, logger="scheduling"):
            for _ in range(2):  # two polls: every due execution armed again, each failing
                for eid in ids:
                    h.scheduler.schedule(eid, h.clock())
                assert sorted(h.scheduler.advance(5)) == ids
            failing = [r for r in caplog.records if r.levelno >= logging.ERROR]
            said = (
                "the store is failing (database or disk is full): due alarms stay in the store "
                "and fire again; further failures are counted, not logged"
            )
            assert [r.getMessage() for r in failing] == [said]
            caplog.clear()
            store.failing = False
            for eid in ids:
                h.scheduler.schedule(eid, h.clock())
            h.scheduler.advance(5)
            h.scheduler.advance(5)
        assert [h.runner.get(eid).status for eid in ids] == [ExecutionStatus.COMPLETED] * 3
        back = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert back == ["the store works again, after 6 failed alarms"]


def test_a_worker_whose_rearming_fails_says_so_once_then_once_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's re-arming rounds (every ``--poll``) against a failing store: one ERROR,
    one WARNING with the count once a round works (a WARNING every round before)."""
    import threading

    from scheduling._cli.worker import rearm_until

    stop = threading.Event()
    rounds: list[int] = []

    class Rearming:
        def rearm_due(self) -> int:
            rounds.append(len(rounds))
            if len(rounds) <= 3:
                raise StoreError("could not connect to the database")
            if len(rounds) == 5:
                stop.set()
            return 0

    with caplog.at_level(logging.DEBUG, logger="scheduling.worker"):
        rearm_until(Rearming(), stop, 0)  # type: ignore[arg-type]
    assert len(rounds) == 5
    failed = (
        "re-arming due executions failed: could not connect to the database; trying again "
        "every 0s (further failures are counted, not logged)"
    )
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("ERROR", failed),
        ("WARNING", "re-arming due executions works again, after 3 failed rounds"),
    ]


def test_the_traceback_is_logged_at_debug_after_the_nodes_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DEBUG carries the failed node's recorded traceback, one record, after its INFO line."""
    clock = ManualClock()
    runner = Runner(
        registry=flaky_registry(5),
        store=MemoryStore(),
        scheduler=ManualScheduler(clock=clock),
    )
    with caplog.at_level(logging.DEBUG, logger="scheduling.events"), runner:
        execution_id = runner.start(_workflow(max_attempts=1), None)
    recorded = runner.get(execution_id).error
    assert recorded is not None
    assert recorded.traceback is not None
    records = [r for r in caplog.records if r.name == "scheduling.events"]
    (debug,) = [r for r in records if "Traceback" in r.getMessage()]
    assert debug.levelno == logging.DEBUG
    assert debug.getMessage() == (
        f"execution {execution_id}: node call failed here:\n{recorded.traceback}"
    )
    assert records.index(debug) > [r.prana_event for r in records].index("node_failed")  # type: ignore[attr-defined]


def test_every_event_reads_as_a_sentence() -> None:
    """No line is the raw event name (``execution <id>: execution_completed``)."""
    from datetime import datetime, timezone

    from prana import ErrorInfo, Event, EventType
    from scheduling._eventlog import _message

    error = ErrorInfo(code="action_error", type="KeyError", module="builtins", message="'a'")
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    for kind in EventType:
        event = Event(
            type=kind, execution_id="e1", workflow_id="wf", at=at, node_key="call",
            run_index=0, attempt=2, max_attempts=3, delay_ms=90_000, error=error, kind="timer",
        )  # fmt: skip
        text = _message(event)
        assert kind.value not in text, text
        assert text.startswith("execution e1"), text
    retry = Event(
        type=EventType.NODE_RETRY_SCHEDULED, execution_id="e1", workflow_id="wf", at=at,
        node_key="call", attempt=2, max_attempts=3, delay_ms=90_000, error=error,
    )  # fmt: skip
    assert "retrying in 1m30s" in _message(retry)


def test_the_web_writes_durations_as_the_console_and_the_log() -> None:
    """One formatter: 90 s is ``1m30s`` on the console, in the log and on the page."""
    from prana.shell import format_duration
    from scheduling.web._html import _duration

    for ms in (0, 250, 2_000, 15_636, 90_000, 7_300_000):
        assert _duration(ms) == format_duration(ms / 1000)
    assert _duration(None) == "-"
