"""One clock per deployment: the store's server's time, whatever each process's wall clock says.

``StoreClock`` reads a server's time and carries it on with the monotonic clock; a runner
over a ``PostgresStore`` reads it, and APScheduler (which fires by the wall clock) follows
it. The processes' own skewed clocks are in ``tests/test_faults.py`` (libfaketime).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pytest

from scheduling import Runner
from scheduling._clock import StoreClock
from scheduling.abc import FollowingScheduler, TimedStore
from scheduling.adapters.apscheduler import APSchedulerAdapter

if TYPE_CHECKING:
    from collections.abc import Callable

    from scheduling.stores.postgres import PostgresStore

UTC = timezone.utc
SKEW = timedelta(minutes=2)
NEAR = timedelta(milliseconds=200)
"""How close two readings of one instant must be (a loaded machine's scheduling noise)."""


def off_by(skew: timedelta) -> Callable[[], datetime]:
    """A server clock ``skew`` from this process's wall clock."""
    return lambda: datetime.now(UTC) + skew


@pytest.mark.parametrize("skew", [SKEW, -SKEW])
def test_the_store_clock_reads_the_servers_time_not_the_wall_clock(skew: timedelta) -> None:
    """Every reading is the server's time, carried on between readings; the wall clock's
    offset is measured."""
    server = off_by(skew)
    clock = StoreClock(server, where="the test server")
    first = clock()
    assert abs(first - server()) < NEAR
    assert clock.offset_seconds is not None
    assert abs(clock.offset_seconds + skew.total_seconds()) < NEAR.total_seconds()
    later = clock()
    assert later >= first
    assert abs(later - server()) < NEAR


def test_a_skewed_wall_clock_is_said_once_with_its_offset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A process clock 2 minutes off the server's: one WARNING naming the offset."""
    caplog.set_level(logging.WARNING, logger="scheduling.clock")
    clock = StoreClock(off_by(-SKEW), where="the test server")
    clock()
    assert clock.sync()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "+120." in warnings[0].getMessage()
    assert "the test server" in warnings[0].getMessage()


def test_a_clock_in_step_with_the_server_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """No warning when the wall clock agrees with the server's."""
    caplog.set_level(logging.WARNING, logger="scheduling.clock")
    clock = StoreClock(off_by(timedelta(0)), where="the test server")
    clock()
    assert not caplog.records


def test_until_the_server_answers_the_wall_clock_stands_in_then_the_last_reading() -> None:
    """No reading yet: the wall clock; a reading that fails later keeps the last one."""
    answers: list[datetime | None] = [None]
    server = off_by(SKEW)

    def read() -> datetime | None:
        return server() if answers[-1] is not None else None

    clock = StoreClock(read, where="the test server")
    assert abs(clock() - datetime.now(UTC)) < NEAR
    answers.append(server())
    assert clock.sync()
    answers.append(None)
    assert not clock.sync()
    assert abs(clock() - server()) < NEAR


@pytest.mark.postgres
def test_a_runner_over_postgres_reads_the_servers_clock(postgres_store: PostgresStore) -> None:
    """A ``PostgresStore`` is a ``TimedStore``; a runner given no clock reads it, and the
    clock agrees with the server's ``clock_timestamp()``."""
    assert isinstance(postgres_store, TimedStore)
    runner = Runner(store=postgres_store)
    assert runner.clock is postgres_store.clock
    postgres_store.setup()
    with postgres_store._connections().connection() as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    assert abs(runner.clock() - row[0]) < NEAR


@pytest.mark.parametrize("skew", [SKEW, -SKEW])
def test_apscheduler_fires_by_the_clock_it_follows(skew: timedelta) -> None:
    """An alarm due 0.3 s ahead by a clock 2 minutes off the wall fires 0.3 s from now: not
    at once (early), not 2 minutes late."""
    adapter = APSchedulerAdapter()
    assert isinstance(adapter, FollowingScheduler)
    clock = off_by(skew)
    adapter.follow(clock)
    fired: list[float] = []
    done = threading.Event()

    def fire(execution_id: str) -> None:
        fired.append(time.monotonic())
        done.set()

    adapter.start(fire)
    try:
        armed = time.monotonic()
        adapter.schedule("e1", clock() + timedelta(seconds=0.3))
        assert done.wait(10), "never fired (late by the skew)"
    finally:
        adapter.shutdown()
    assert fired[0] - armed >= 0.25, "fired early (by the wall clock)"


def test_a_runner_hands_its_clock_to_a_following_scheduler() -> None:
    """The runner's clock is the one its scheduler follows."""
    clock = off_by(SKEW)
    adapter = APSchedulerAdapter()
    runner = Runner(scheduler=adapter, clock=clock)
    assert adapter._clock is runner.clock or adapter._clock is clock
