"""The console view: pure formatting of retries, outcomes, statistics and timelines."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from doubles import T0, at, fails_first, flaky_node, workflow
from hypothesis import given
from hypothesis import strategies as st

from prana import (
    AttemptOutcome,
    AttemptRecord,
    ErrorInfo,
    Event,
    EventType,
    ExecutionStatus,
    NodeExecution,
    NodeStatus,
    Registry,
    WorkflowExecution,
    execute_workflow,
)
from prana.testing import ManualClock
from scheduling import ConsoleView, RetryStats
from scheduling._console import (
    format_duration,
    format_error,
    format_retry,
    format_stats,
    format_timeline,
    node_lateness,
)
from scheduling.stores.memory import MemoryStore
from scheduling.web._html import execution_fragment
from scheduling.web._views import execution_view

ERR = ErrorInfo(code="action_error", type="ConnectionError", module="builtins", message="refused")


def event(type_: EventType, **fields: Any) -> Event:
    fields.setdefault("execution_id", "e1")
    return Event(type=type_, workflow_id="wf", at=T0, **fields)


def retry(attempt: int, delay_ms: int = 2000, eid: str = "e1") -> Event:
    return event(
        EventType.NODE_RETRY_SCHEDULED,
        execution_id=eid,
        node_key="r",
        run_index=0,
        attempt=attempt,
        max_attempts=4,
        delay_ms=delay_ms,
        error=ERR,
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (2, "2.0s"), (59.9, "59.9s"), (90, "1m30s"), (7260, "2h1m"), (-1.5, "-1.5s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    """Durations print in the largest fitting unit, keeping the sign."""
    assert format_duration(seconds) == text


@given(st.floats(min_value=-1e7, max_value=1e7, allow_nan=False))
def test_format_duration_never_fails(seconds: float) -> None:
    """Any finite duration formats to non-empty text."""
    assert format_duration(seconds)


def test_format_retry_line() -> None:
    """A scheduled retry reads ``↻ r (attempt 2/4) retrying in 2.0s after E: msg``."""
    assert (
        format_retry(retry(2))
        == "↻ r (attempt 2/4) retrying in 2.0s after ConnectionError: refused"
    )


def test_format_retry_without_limit_or_error() -> None:
    """A retry with no attempt limit omits the total; a missing error prints as ``?``."""
    unlimited = event(EventType.NODE_RETRY_SCHEDULED, node_key="r", attempt=3, delay_ms=0)
    assert format_retry(unlimited) == "↻ r (attempt 3) retrying in 0ms after ?"
    assert format_error(None) == "?"


def test_success_after_retry_is_one_compact_line() -> None:
    """A node that recovers after retries gets one compact line naming the retries."""
    view = ConsoleView(write=lambda _t: None)
    view(event(EventType.EXECUTION_STARTED))
    view(retry(2))
    view(retry(3))
    view(event(EventType.NODE_COMPLETED, node_key="r", run_index=0, attempt=3))
    assert view.lines[-1] == "✓ r succeeded on attempt 3 after 2 retries (ConnectionError)"


def test_failure_after_retries_is_a_detailed_block() -> None:
    """A node whose retries ran out gets a block listing every attempt and its error."""
    written: list[str] = []
    view = ConsoleView(write=written.append)
    view(event(EventType.EXECUTION_STARTED))
    view(retry(2, 200))
    view(retry(3, 400))
    view(event(EventType.NODE_RETRY_EXHAUSTED, node_key="r", run_index=0, attempt=3, error=ERR))
    view(event(EventType.NODE_FAILED, node_key="r", run_index=0, attempt=3, error=ERR))
    view(event(EventType.EXECUTION_FAILED, node_key="r", error=ERR))
    block = written[-2]
    assert block.splitlines() == [
        "✗ r failed after 3 attempts",
        "    attempt 1: ConnectionError: refused  (retried after 200ms)",
        "    attempt 2: ConnectionError: refused  (retried after 400ms)",
        "    attempt 3: ConnectionError: refused  (gave up)",
    ]
    assert written[-1] == "✗ wf failed at r: ConnectionError: refused (e1)"
    assert written == view.lines


def test_stats_count_executions_and_retries() -> None:
    """The summary counts executions, recoveries, exhaustions and retries."""
    view = ConsoleView(write=lambda _t: None)
    for eid in ("a", "b", "c"):
        view(event(EventType.EXECUTION_STARTED, execution_id=eid))
    view(retry(2, eid="a"))
    view(event(EventType.NODE_COMPLETED, execution_id="a", node_key="r", run_index=0, attempt=2))
    view(retry(2, eid="b"))
    view(retry(3, eid="b"))
    view(
        event(
            EventType.NODE_RETRY_EXHAUSTED, execution_id="b", node_key="r", run_index=0, attempt=3
        )
    )
    stats = view.stats()
    assert stats == RetryStats(
        executions=3,
        executions_with_retries=2,
        succeeded_after_retry=1,
        failed_after_retries=1,
        retry_attempts=3,
    )
    assert stats.mean_retries == 1.0
    assert "total retry attempts:      3" in view.summary()
    assert "mean retries / execution:  1.00" in format_stats(stats)
    assert RetryStats().mean_retries == 0.0


def test_stats_count_an_execution_resumed_not_started_here() -> None:
    """``prana deliver`` and ``prana redrive`` resume an execution started elsewhere: the summary
    still counts it (it said "executions: 0" beside "executions with retries: 1")."""
    view = ConsoleView(write=lambda _t: None)
    view(event(EventType.EXECUTION_REDRIVEN, node_key="r", run_index=0, attempt=3, error=ERR))
    view(retry(4))
    view(event(EventType.NODE_COMPLETED, node_key="r", run_index=0, attempt=4))
    view(event(EventType.EXECUTION_COMPLETED))
    stats = view.stats()
    assert (stats.executions, stats.executions_with_retries, stats.retry_attempts) == (1, 1, 1)
    assert stats.mean_retries == 1.0


def test_live_state_tracks_running_and_waiting_executions() -> None:
    """``status_lines`` shows each execution still running or waiting, gone once it ends."""
    view = ConsoleView(write=lambda _t: None)
    view(event(EventType.EXECUTION_STARTED, execution_id="a"))
    view(event(EventType.EXECUTION_STARTED, execution_id="b"))
    view(event(EventType.NODE_STARTED, execution_id="a", node_key="r", attempt=1))
    view(event(EventType.EXECUTION_SUSPENDED, execution_id="b", node_key="w", kind="webhook"))
    assert view.status_lines() == ["a  running r (attempt 1)", "b  waiting on webhook at w"]
    view(event(EventType.EXECUTION_COMPLETED, execution_id="a"))
    view(event(EventType.EXECUTION_CANCELLED, execution_id="b"))
    assert view.status_lines() == []
    assert view.lines[-2:] == ["✓ wf completed (a)", "✗ b cancelled"]


def kept_items(view: ConsoleView) -> dict[str, int]:
    """How many items each container the view holds keeps: every list, dict, set or deque."""
    import collections

    containers = (list, dict, set, collections.deque)
    return {name: len(v) for name, v in vars(view).items() if isinstance(v, containers)}


def feed_one_of_each_kind(view: ConsoleView, n: int) -> None:
    """Execution ``n`` in one of five lives, most of which a long-running worker meets.

    0: completes after a retry; 1: fails after its retries ran out; 2: retries here, then
    another worker runs the retry (nothing more is heard); 3: waits on a webhook delivered
    elsewhere (nothing more is heard); 4: cancelled while waiting to retry.
    """
    eid = f"e{n}"
    view(event(EventType.EXECUTION_STARTED, execution_id=eid))
    view(event(EventType.NODE_STARTED, execution_id=eid, node_key="r", attempt=1))
    kind = n % 5
    if kind == 3:
        view(event(EventType.EXECUTION_SUSPENDED, execution_id=eid, node_key="w", kind="webhook"))
        return
    view(retry(2, eid=eid))
    if kind == 0:
        view(
            event(EventType.NODE_COMPLETED, execution_id=eid, node_key="r", run_index=0, attempt=2)
        )
        view(event(EventType.EXECUTION_COMPLETED, execution_id=eid))
    elif kind == 1:
        view(
            event(
                EventType.NODE_RETRY_EXHAUSTED,
                execution_id=eid,
                node_key="r",
                run_index=0,
                attempt=2,
                error=ERR,
            )
        )
        view(event(EventType.EXECUTION_FAILED, execution_id=eid, node_key="r", error=ERR))
    elif kind == 4:
        view(event(EventType.EXECUTION_CANCELLED, execution_id=eid))


def test_a_long_running_view_keeps_a_bounded_number_of_items() -> None:
    """Fed thousands of executions, the view keeps at most its bounds, and counts them all.

    A ``prana worker`` runs for weeks: every line and every execution id kept would grow
    without bound. The lines kept are the last ``max_lines``; per-execution state is kept
    for at most ``max_executions`` executions; the statistics stay exact.
    """
    view = ConsoleView(write=lambda _t: None, max_lines=50, max_executions=20)
    for n in range(5000):
        feed_one_of_each_kind(view, n)
        assert all(size <= 50 for size in kept_items(view).values()), (n, kept_items(view))
    assert kept_items(view)["lines"] == 50
    assert len(view.running) <= 20
    assert view.lines[-1] == "✗ e4999 cancelled"
    assert view.stats() == RetryStats(
        executions=5000,
        executions_with_retries=4000,
        succeeded_after_retry=1000,
        failed_after_retries=1000,
        retry_attempts=4000,
    )


def test_the_default_bounds_hold_too() -> None:
    """``ConsoleView()`` keeps at most 1,000 lines and 1,000 executions' state by default."""
    view = ConsoleView(write=lambda _t: None)
    for n in range(5000):
        feed_one_of_each_kind(view, n)
    assert max(kept_items(view).values()) <= 1000
    assert view.stats().executions == 5000


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_bad_bounds_are_refused(bad: Any) -> None:
    """A bound that is not a whole number >= 1 is refused, naming the argument."""
    with pytest.raises(ValueError, match="max_lines"):
        ConsoleView(write=print, max_lines=bad)
    with pytest.raises(ValueError, match="max_executions"):
        ConsoleView(write=print, max_executions=bad)


def attempt(n: int, start: float, end: float, **kw: Any) -> AttemptRecord:
    return AttemptRecord(
        number=n,
        started_at=T0 + timedelta(seconds=start),
        ended_at=T0 + timedelta(seconds=end),
        **kw,
    )


def test_timeline_shows_attempts_errors_delays_and_lateness() -> None:
    """``prana show``'s timeline lists every attempt with its error, delay and lateness."""
    run = NodeExecution(
        node_key="r",
        status=NodeStatus.COMPLETED,
        execution_index=1,
        run_index=0,
        started_at=T0,
        completed_at=T0 + timedelta(seconds=3.5),
        output_port="main",
        attempts=(
            attempt(1, 0, 0, outcome=AttemptOutcome.FAILED, error=ERR, retry_delay_ms=2000),
            attempt(
                2, 3.5, 3.5, outcome=AttemptOutcome.COMPLETED, due_at=T0 + timedelta(seconds=2)
            ),
        ),
    )
    execution = WorkflowExecution(
        id="e1",
        workflow_id="wf",
        workflow_version=1,
        status=ExecutionStatus.COMPLETED,
        node_executions={"r": (run,)},
        started_at=T0,
        completed_at=T0 + timedelta(seconds=3.5),
    )
    text = format_timeline(execution)
    assert "status    completed" in text
    assert "attempt 1: failed  +0ms .. +0ms  ConnectionError: refused  (retry in 2.0s)" in text
    assert "attempt 2: completed  +3.5s .. +3.5s  due +2.0s  late 1.5s" in text
    assert node_lateness(run) == [(2, timedelta(seconds=1.5))]


def test_timer_lateness_comes_from_the_wait_params() -> None:
    """An interval or schedule wait is due at its start plus the duration, or at ``schedule_at``."""

    def wait_run(params: dict[str, Any], completed: float) -> NodeExecution:
        return NodeExecution(
            node_key="w",
            status=NodeStatus.COMPLETED,
            execution_index=1,
            run_index=0,
            started_at=T0,
            completed_at=T0 + timedelta(seconds=completed),
            params=params,
            attempts=(attempt(1, 0, completed, outcome=AttemptOutcome.COMPLETED),),
        )

    interval = wait_run({"mode": "interval", "duration": 2, "unit": "minutes"}, 125)
    assert node_lateness(interval) == [(1, timedelta(seconds=5))]
    at = (T0 + timedelta(seconds=10)).isoformat()
    assert node_lateness(wait_run({"mode": "schedule", "schedule_at": at}, 10)) == [
        (1, timedelta(0))
    ]
    assert node_lateness(wait_run({"mode": "schedule", "schedule_at": "garbage"}, 10)) == []
    assert node_lateness(wait_run({"mode": "webhook"}, 10)) == []


def test_live_view_is_plain_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Off a terminal, ``live()`` draws nothing and lines print plainly, uncoloured."""
    view = ConsoleView()
    with view.live():
        view(event(EventType.EXECUTION_STARTED))
    assert capsys.readouterr().out == "▶ wf started (e1)\n"


def test_success_seen_by_a_later_process_counts_every_retry() -> None:
    """A worker that saw only the last retry still says attempt 3 came after 2 retries."""
    view = ConsoleView(write=lambda _t: None)
    view(retry(3))  # attempt 1 failed and was retried in another process (a prana run)
    view(event(EventType.NODE_COMPLETED, node_key="r", run_index=0, attempt=3))
    assert view.lines[-1] == "✓ r succeeded on attempt 3 after 2 retries (ConnectionError)"


def test_timeline_of_a_claimed_execution_says_what_runs() -> None:
    """``prana show`` of a light claim names the resume in flight and its lease."""
    store = MemoryStore()
    registry = Registry()
    registry.register("test.flaky", fails_first)
    outcome = execute_workflow(
        workflow(flaky_node()), None, registry=registry, clock=ManualClock(T0)
    )
    version = store.save(outcome.execution, None)
    store.claim(outcome.execution.id, version, at(31), at(1))
    claimed, _ = store.load(outcome.execution.id)
    text = format_timeline(claimed)
    assert "status    running" in text
    assert f"  resuming  retry at r (attempt 2), claimed {at(1).isoformat()}\n" in text
    assert "            (the node shows it once the attempt ends)\n" in text
    assert f"  lease     until {at(31).isoformat()}" in text
    assert f"  lease     until {at(31).isoformat()}" in format_timeline(claimed, at(30))
    ended = format_timeline(claimed, at(31))
    assert "until" not in ended
    assert f"  lease     ended {at(31).isoformat()}: no process renewed it" in ended


def test_the_web_view_of_a_claimed_execution_says_what_runs() -> None:
    """The web view names a light claim's resume in flight and the lease, as ``prana show``."""
    store = MemoryStore()
    registry = Registry()
    registry.register("test.flaky", fails_first)
    wf = workflow(flaky_node())
    outcome = execute_workflow(wf, None, registry=registry, clock=ManualClock(T0))
    version = store.save(outcome.execution, None)
    store.claim(outcome.execution.id, version, at(31), at(1))
    claimed, now = store.load(outcome.execution.id)
    view = execution_view(claimed, now, wf, registry)
    assert view["waiting"] is None
    assert view["resuming"] == {
        "kind": "retry",
        "node_key": "r",
        "attempt": 2,
        "claimed_at": at(1).isoformat(),
    }
    assert view["lease_expires_at"] == at(31).isoformat()
    html = execution_fragment(view)
    assert "<dt>resuming</dt>" in html
    assert "attempt 2" in html
    assert "<dt>lease</dt>" in html
