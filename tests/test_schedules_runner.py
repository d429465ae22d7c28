"""Schedules on a Runner: slots fired by its alarms, once each, catch-up and overlap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from doubles import T0, Harness, workflow

from prana import ExecutionStatus, Node
from scheduling import Every, Schedule, ScheduleNotFound, StaleVersionError
from scheduling._schedules import slot_execution_id

HOUR = 3600


def approval() -> Node:
    return Node(key="a", type="test.approval")


def harness(store: Any, *nodes: Node) -> Harness:
    h = Harness(store)
    h.runner.register_workflow(workflow(*nodes, wid="report"))
    h.runner.open()
    return h


def ids(h: Harness) -> list[str]:
    return sorted(s.id for s in h.store.list(limit=1000))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        from scheduling.stores.memory import MemoryStore

        return MemoryStore()
    return request.getfixturevalue(f"{request.param}_store")


def test_each_slot_starts_once_from_the_alarm(any_store: Any) -> None:
    h = harness(any_store)
    h.runner.schedule(Schedule("hourly", "report", Every("1h"), input={"n": 1}))
    assert h.runner.schedules.get("hourly").next[0] == T0 + timedelta(hours=1)
    h.scheduler.advance(3 * HOUR)
    assert ids(h) == [slot_execution_id("hourly", T0 + timedelta(hours=k)) for k in (1, 2, 3)]
    assert h.runner.schedules.tick("hourly") == []  # nothing new is due


def test_a_duplicate_slot_start_is_refused(any_store: Any) -> None:
    h = harness(any_store)
    h.runner.schedule(Schedule("s", "report", Every("1h")))
    h.clock.advance(HOUR)
    first = h.runner.schedules.tick("s")
    assert [o.outcome for o in first] == ["started"]
    # another worker, its state read before the first advanced it, ticks the same slot
    any_store.schedule_advance("s", f'{{"cursor": "{T0.isoformat()}"}}', 2)
    second = h.runner.schedules.tick("s")
    assert [o.outcome for o in second] == ["duplicate"]
    assert len(ids(h)) == 1


@pytest.mark.parametrize(("policy", "started"), [("skip", 0), ("last", 1), ("all", 3)])
def test_catch_up_after_downtime(any_store: Any, policy: str, started: int) -> None:
    h = harness(any_store)
    h.runner.schedule(Schedule("s", "report", Every("1h"), catch_up=policy, catch_up_limit=3))  # type: ignore[arg-type]
    h.runner.close()
    h.clock.advance(5 * HOUR + 600)  # down through five slots
    h.runner.open()
    assert len(ids(h)) == started
    if started:
        assert ids(h)[-1] == slot_execution_id("s", T0 + timedelta(hours=5))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", ["skipped"]),
        ("buffer_one", ["buffered"]),
        ("allow_all", ["started"]),
        ("cancel_older", ["started"]),
    ],
)
def test_overlap_policies(any_store: Any, policy: str, expected: list[str]) -> None:
    h = harness(any_store, approval())
    h.runner.schedule(Schedule("s", "report", Every("1h"), overlap=policy))  # type: ignore[arg-type]
    h.scheduler.advance(HOUR)
    first = slot_execution_id("s", T0 + timedelta(hours=1))
    assert h.runner.get(first).status is ExecutionStatus.SUSPENDED
    h.clock.advance(HOUR)
    assert [o.outcome for o in h.runner.schedules.tick("s")] == expected
    older = h.runner.get(first).status
    assert (older is ExecutionStatus.CANCELLED) == (policy == "cancel_older")
    if policy == "buffer_one":
        h.runner.cancel(first)
        h.clock.advance(60)
        outcomes = h.runner.schedules.tick("s")
        assert [(o.kind, o.outcome) for o in outcomes] == [("buffered", "started")]


def test_pause_resume_delete(any_store: Any) -> None:
    h = harness(any_store)
    h.runner.schedule(Schedule("s", "report", Every("1h")))
    h.runner.schedules.pause("s")
    assert h.runner.schedules.get("s").next == ()
    h.scheduler.advance(3 * HOUR)
    assert ids(h) == []
    h.runner.schedules.resume("s")
    h.scheduler.advance(HOUR)
    assert ids(h) == [slot_execution_id("s", T0 + timedelta(hours=4))]
    with pytest.raises(StaleVersionError, match="replace=True"):
        h.runner.schedule(Schedule("s", "report", Every("1h")))
    h.runner.schedules.delete("s")
    with pytest.raises(ScheduleNotFound):
        h.runner.schedules.get("s")
    h.scheduler.advance(HOUR)
    assert len(ids(h)) == 1


def test_a_schedule_of_an_unknown_workflow_loses_its_slot_not_the_runner(
    any_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness(any_store)
    h.runner.schedule(Schedule("ghost", "nowhere", Every("1h")))
    h.runner.schedule(Schedule("s", "report", Every("1h")))
    h.runner.close()
    h.clock.advance(HOUR + 1)
    h.runner.open()  # catches up both: the bad one is logged, the good one starts
    assert ids(h) == [slot_execution_id("s", T0 + timedelta(hours=1))]
    assert "schedule 'ghost' slot" in caplog.text
    assert h.runner.schedules.get("ghost").state.cursor == T0 + timedelta(hours=1)
