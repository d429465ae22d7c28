"""Schedules on a Runner: slots fired by its alarms, once each, catch-up and overlap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from doubles import T0, Harness, workflow
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2 * HOUR)), max_size=12))
def test_two_runners_on_one_database_start_each_slot_once(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]]
) -> None:
    """Runners sharing a SQLite file tick in any order, late or stale: one start per slot."""
    from prana.testing import ManualClock
    from scheduling.stores.sqlite import SQLiteStore

    path = tmp_path_factory.mktemp("two") / "p.db"
    clock = ManualClock(T0)
    stores = [SQLiteStore(path) for _ in range(2)]
    runners = [Harness(store, clock=clock) for store in stores]
    for h in runners:
        h.runner.register_workflow(workflow(wid="report"))
        h.runner.open()
    runners[0].runner.schedule(Schedule("s", "report", Every("30m"), catch_up="all"))
    stale = stores[0].schedule_row("s")
    for who, seconds in steps:
        clock.advance(seconds)
        if who == 2:  # a worker whose state read is older than the last tick's
            assert stale is not None
            row = stores[0].schedule_row("s")
            assert row is not None
            stores[0].schedule_advance("s", stale[1], row[2])
        else:
            runners[who].runner.schedules.tick("s")
    runners[1].runner.schedules.tick("s")
    started = sorted(r.id for r in runners[0].store.list(limit=1000))
    assert len(started) == len(set(started))
    elapsed = clock() - T0
    due = [
        T0 + timedelta(minutes=30 * k) for k in range(1, int(elapsed / timedelta(minutes=30)) + 1)
    ]
    assert set(started) <= {slot_execution_id("s", slot) for slot in due}
    if due:  # the newest slot always starts (catch-up "all", nothing overlaps)
        assert slot_execution_id("s", due[-1]) in started
    for h in runners:
        h.runner.close()
    for store in stores:
        store.close()
