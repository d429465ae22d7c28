"""The ``Scheduler`` protocol, tested once over every adapter, then each adapter's own behaviour.

The shared part is the shipped kit, ``scheduling.testing.SchedulerConformance``, run over
each adapter through a harness that reads its now and lets its alarms fire (a manual clock
advanced, an event loop driven). Real adapters use delays of at most 0.2 s after the kit's
lead and wait for completion on an event with a timeout; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler
from doubles import T0, at
from hypothesis import given
from hypothesis import strategies as st

from prana import InvalidSettingsError, PranaError
from prana.testing import ManualClock
from scheduling.abc import Scheduler
from scheduling.adapters import apscheduler as aps_module
from scheduling.adapters.apscheduler import APSchedulerAdapter, job_id, stop_scheduler
from scheduling.adapters.asyncio import AsyncioScheduler
from scheduling.adapters.manual import ManualScheduler, SchedulerStateError
from scheduling.testing import FireRecorder, SchedulerConformance

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

UTC = timezone.utc
TIMEOUT = 5.0  # seconds to wait for an alarm that must fire; only reached on failure


def real_now() -> datetime:
    return datetime.now(UTC)


class Recorder(FireRecorder):
    """The kit's recorder, waiting ``TIMEOUT`` by default."""

    def wait_threaded(self, count: int, timeout: float = TIMEOUT) -> bool:
        return super().wait_threaded(count, timeout)


class SchedulerHarness:
    """One adapter under test, with a way to read its now and to let its alarms fire."""

    name = "abstract"
    scheduler: Any

    def now(self) -> datetime:
        return real_now()

    def start(self, fire: FireRecorder) -> None:
        self.scheduler.start(fire)

    def wait_for(self, recorder: FireRecorder, count: int) -> None:
        """Let alarms fire until ``recorder`` saw ``count`` calls; fail after ``TIMEOUT``."""
        raise NotImplementedError

    def close(self) -> None:
        self.scheduler.shutdown()


class ManualHarness(SchedulerHarness):
    name = "manual"

    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.scheduler = ManualScheduler(self.clock)

    def now(self) -> datetime:
        return self.clock()

    def wait_for(self, recorder: FireRecorder, count: int) -> None:
        # advance() hands a failing callback's error to its caller (the driver), which goes
        # on advancing: later alarms must still fire
        for _ in range(count + 1):
            try:
                self.scheduler.advance(1.0)  # longer than any scenario
            except RuntimeError:  # the failing-alarm check's callback
                continue
            break
        assert len(recorder.calls) >= count, f"only {recorder.ids} fired, wanted {count}"


class ThreadHarness(SchedulerHarness):
    name = "apscheduler-background"

    def __init__(self) -> None:
        self.scheduler = APSchedulerAdapter()

    def wait_for(self, recorder: FireRecorder, count: int) -> None:
        assert recorder.wait_threaded(count, TIMEOUT), f"only {recorder.ids} fired, wanted {count}"


class LoopHarness(SchedulerHarness):
    """Drives a private event loop only while waiting, so the test body stays synchronous."""

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], Any]) -> None:
        self.loop = asyncio.new_event_loop()
        self.scheduler = make(self.loop)

    def start(self, fire: FireRecorder) -> None:
        async def start() -> None:
            self.scheduler.start(fire)

        self.loop.run_until_complete(start())

    def wait_for(self, recorder: FireRecorder, count: int) -> None:
        async def wait() -> None:
            woke = asyncio.Event()
            recorder.listeners.append(woke.set)
            while len(recorder.calls) < count:
                woke.clear()
                await asyncio.wait_for(woke.wait(), TIMEOUT)

        self.loop.run_until_complete(wait())

    def close(self) -> None:
        self.scheduler.shutdown()
        for _ in range(3):  # let queued shutdown work run
            self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


class AsyncioHarness(LoopHarness):
    name = "asyncio"

    def __init__(self) -> None:
        super().__init__(lambda loop: AsyncioScheduler(loop=loop))


class APSAsyncioHarness(LoopHarness):
    name = "apscheduler-asyncio"

    def __init__(self) -> None:
        super().__init__(lambda loop: APSchedulerAdapter(mode="asyncio"))


HARNESSES: list[type[SchedulerHarness]] = [
    ManualHarness,
    AsyncioHarness,
    ThreadHarness,
    APSAsyncioHarness,
]


@pytest.fixture(params=HARNESSES, ids=lambda h: h.name)
def harness(request: pytest.FixtureRequest) -> Iterator[SchedulerHarness]:
    h: SchedulerHarness = request.param()
    yield h
    h.close()


# --- the shared protocol suite: the kit over every adapter --------------------------------


class HarnessConformance(SchedulerConformance):
    """``scheduling.testing.SchedulerConformance``, driven through one harness."""

    make: type[SchedulerHarness]
    h: SchedulerHarness

    @pytest.fixture
    def scheduler(self) -> Iterator[Scheduler]:
        self.h = self.make()
        yield self.h.scheduler
        self.h.close()

    def now(self, scheduler: Scheduler) -> datetime:
        return self.h.now()

    def start(self, scheduler: Scheduler, fire: FireRecorder) -> None:
        self.h.start(fire)

    def wait_for(self, scheduler: Scheduler, fire: FireRecorder, count: int) -> None:
        self.h.wait_for(fire, count)


class TestManualScheduler(HarnessConformance):
    make = ManualHarness


class TestAsyncioScheduler(HarnessConformance):
    make = AsyncioHarness


class TestAPSchedulerBackground(HarnessConformance):
    make = ThreadHarness


class TestAPSchedulerAsyncio(HarnessConformance):
    make = APSAsyncioHarness


def play(h: SchedulerHarness, ops: list[tuple[str, str, float]], lead_ms: float = 0) -> None:
    """Give ``ops`` to the adapter, every due time from one reading of its now (plus
    ``lead_ms``): their order is the scenario's, however long the calls between take."""
    base = h.now() + timedelta(milliseconds=lead_ms)
    for op, execution_id, ms in ops:
        if op == "schedule":
            h.scheduler.schedule(execution_id, base + timedelta(milliseconds=ms))
        else:
            h.scheduler.cancel(execution_id)


class StallingHarness(ManualHarness):
    """The manual reference, where every reading of now comes 70 ms after the one before:
    the calls of a scenario as a loaded machine runs them (``play``'s gaps)."""

    name = "manual-stalling"

    def now(self) -> datetime:
        self.clock.advance(0.07)
        return self.clock()


class TestStallingManualScheduler(HarnessConformance):
    """Was: each alarm's due time read now again, so 60 ms lost between two calls (a
    loaded machine) put ``y`` (due in 40 ms) after ``x`` (due in 100 ms): the real adapters'
    order check failed under load. Every due time of a scenario comes from one reading."""

    make = StallingHarness


class DyingThreadScheduler:
    """A broken scheduler: its timer thread stops for good at the first fire that raises.

    The suite must catch this defect (it passed the suite before the failing-alarm check).
    """

    def __init__(self) -> None:
        self._alarms: dict[str, datetime] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.on_exit: Callable[[], None] = lambda: None

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        with self._cond:
            self._alarms[execution_id] = due_at
            self._cond.notify_all()

    def cancel(self, execution_id: str) -> None:
        with self._cond:
            self._alarms.pop(execution_id, None)

    def start(self, fire: Callable[[str], object]) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, args=(fire,), daemon=True)
        self._thread.start()

    def _run(self, fire: Callable[[str], object]) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stopping:
                        due = sorted(self._alarms.items(), key=lambda item: item[1])
                        if due and due[0][1] <= real_now():
                            break
                        wait = (due[0][1] - real_now()).total_seconds() if due else None
                        self._cond.wait(wait)
                    if self._stopping:
                        return
                    execution_id = due[0][0]
                    del self._alarms[execution_id]
                try:
                    fire(execution_id)
                except Exception:  # noqa: BLE001 - the defect: the thread quietly ends
                    return
        finally:
            self.on_exit()

    def shutdown(self) -> None:
        with self._cond:
            self._stopping = True
            self._alarms.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(TIMEOUT)


class DyingThreadHarness(SchedulerHarness):
    """Waits until enough fired or the timer thread ended (so the failing case is quick)."""

    name = "dying-thread"

    def __init__(self) -> None:
        self.scheduler = DyingThreadScheduler()
        self.ended = threading.Event()

    def start(self, fire: FireRecorder) -> None:
        def ended() -> None:
            self.ended.set()
            with fire._cond:
                fire._cond.notify_all()

        self.scheduler.on_exit = ended
        self.scheduler.start(fire)

    def wait_for(self, recorder: FireRecorder, count: int) -> None:
        with recorder._cond:
            recorder._cond.wait_for(
                lambda: len(recorder.calls) >= count or self.ended.is_set(), timeout=TIMEOUT
            )
        assert len(recorder.calls) >= count, f"only {recorder.ids} fired, wanted {count}"


def test_the_suite_catches_a_timer_thread_that_dies_after_a_failing_alarm() -> None:
    """The broken double passes the kit's due-order check, and fails the failing-alarm one."""

    class Dying(HarnessConformance):
        make = DyingThreadHarness

    kit = Dying()
    kit.h = DyingThreadHarness()
    try:
        kit.test_alarms_fire_once_each_in_due_order(kit.h.scheduler, "due order")
    finally:
        kit.h.close()
    kit.h = DyingThreadHarness()
    try:
        with pytest.raises(AssertionError, match=r"only \['bad-1'\] fired, wanted 2"):
            kit.test_alarms_after_a_failing_one_still_fire(kit.h.scheduler)
    finally:
        kit.h.close()


def test_naive_due_at_is_refused(harness: SchedulerHarness) -> None:
    """A naive (or non-datetime) ``due_at`` raises an ``InvalidSettingsError`` naming the fix."""
    with pytest.raises(InvalidSettingsError, match="naive") as caught:
        harness.scheduler.schedule("x", datetime(2030, 1, 1))  # noqa: DTZ001 - the bad input
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, PranaError)
    assert "timezone.utc" in str(caught.value)
    with pytest.raises(InvalidSettingsError, match="aware datetime, got str"):
        harness.scheduler.schedule("x", "2030-01-01T00:00:00Z")


def test_importing_scheduling_never_imports_apscheduler() -> None:
    """``import scheduling`` and the dependency-free adapters leave APScheduler unimported."""
    code = (
        "import sys, scheduling, scheduling.adapters, scheduling.adapters.manual, "
        "scheduling.adapters.asyncio\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'apscheduler')\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr


# --- ManualScheduler ----------------------------------------------------------------------


@pytest.fixture
def manual(clock: ManualClock) -> ManualScheduler:
    return ManualScheduler(clock)


def test_manual_steps_the_clock_to_each_due_time(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """Each alarm fires with the clock at its due time; afterwards the clock is now + seconds."""
    seen: list[tuple[str, datetime]] = []
    manual.start(lambda eid: seen.append((eid, clock())))
    manual.schedule("b", at(5))
    manual.schedule("a", at(2))
    assert manual.advance(10) == ["a", "b"]
    assert seen == [("a", at(2)), ("b", at(5))]
    assert clock() == at(10)


def test_manual_leaves_alarms_beyond_the_window_pending(manual: ManualScheduler) -> None:
    """An alarm due after now + seconds stays pending; one due exactly at the end fires."""
    manual.start(Recorder())
    manual.schedule("edge", at(3))
    manual.schedule("later", at(3.001))
    assert manual.advance(3) == ["edge"]
    assert manual.pending() == [("later", at(3.001))]


def test_manual_overdue_alarm_fires_at_the_current_now(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """An alarm armed already overdue fires at the current now: the clock never goes back."""
    seen: list[datetime] = []
    manual.start(lambda eid: seen.append(clock()))
    manual.schedule("overdue", T0 - timedelta(hours=1))
    assert manual.advance(0) == ["overdue"]
    assert seen == [T0]
    assert clock() == T0


def test_manual_fires_alarms_armed_during_the_same_advance(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """A callback's new alarm fires in the same advance if due inside the window, else waits."""
    seen: list[tuple[str, datetime]] = []

    def fire(eid: str) -> None:
        seen.append((eid, clock()))
        if eid == "first":
            manual.schedule("inside", clock() + timedelta(seconds=1))
            manual.schedule("outside", clock() + timedelta(seconds=100))

    manual.start(fire)
    manual.schedule("first", at(1))
    assert manual.advance(5) == ["first", "inside"]
    assert seen == [("first", at(1)), ("inside", at(2))]
    assert manual.pending() == [("outside", at(101))]


def test_manual_callback_can_cancel_a_later_alarm(manual: ManualScheduler) -> None:
    """An alarm cancelled by an earlier alarm's callback during advance does not fire."""
    manual.start(lambda eid: manual.cancel("second") if eid == "first" else None)
    manual.schedule("first", at(1))
    manual.schedule("second", at(2))
    assert manual.advance(5) == ["first"]


def test_manual_ties_fire_in_schedule_order(manual: ManualScheduler) -> None:
    """Alarms due at the same time fire in the order they were (last) scheduled."""
    manual.start(Recorder())
    for eid in ["c", "a", "b"]:
        manual.schedule(eid, at(1))
    manual.schedule("c", at(1))  # re-arming moves it behind the others
    assert manual.advance(1) == ["a", "b", "c"]


def test_manual_run_due_fires_only_what_is_due_without_moving_the_clock(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """``run_due`` fires alarms due at now (or before) and leaves the clock where it is."""
    manual.start(Recorder())
    manual.schedule("past", at(-1))
    manual.schedule("now", at(0))
    manual.schedule("future", at(1))
    assert manual.run_due() == ["past", "now"]
    assert clock() == T0
    assert manual.pending() == [("future", at(1))]


def test_manual_pending_and_next_due(manual: ManualScheduler) -> None:
    """``pending`` lists (id, due_at) in firing order and ``next_due`` is the earliest."""
    assert manual.next_due() is None
    manual.schedule("b", at(2))
    manual.schedule("a", at(1))
    manual.schedule("b", at(3))
    manual.cancel("nobody")
    assert manual.pending() == [("a", at(1)), ("b", at(3))]
    assert manual.next_due() == at(1)


def test_manual_many_rearms_keep_one_alarm_per_id(manual: ManualScheduler) -> None:
    """Re-arming one id many times leaves exactly its latest alarm, which fires once."""
    recorder = Recorder()
    manual.start(recorder)
    for i in range(200):
        manual.schedule("busy", at(i + 1))
    manual.schedule("other", at(0.5))
    assert manual.pending() == [("other", at(0.5)), ("busy", at(200))]
    assert manual.advance(300) == ["other", "busy"]


def test_manual_firing_before_start_raises_and_keeps_the_alarm(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """Firing before ``start`` raises ``SchedulerStateError``; the alarm and clock are unchanged."""
    manual.schedule("x", at(1))
    with pytest.raises(SchedulerStateError, match=r"start\(fire\)"):
        manual.advance(2)
    assert manual.pending() == [("x", at(1))]
    assert clock() == T0


def test_manual_advance_before_start_with_nothing_due_moves_the_clock(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """With nothing due, ``advance`` before ``start`` only moves the clock."""
    manual.schedule("later", at(10))
    assert manual.advance(timedelta(seconds=5)) == []
    assert clock() == at(5)


def test_manual_callback_error_propagates_and_consumes_the_alarm(
    clock: ManualClock, manual: ManualScheduler
) -> None:
    """A raising callback's exception leaves ``advance``; its alarm is gone, later ones wait."""

    def fire(eid: str) -> None:
        if eid == "bad":
            raise RuntimeError("boom")

    manual.start(fire)
    manual.schedule("bad", at(1))
    manual.schedule("good", at(2))
    with pytest.raises(RuntimeError, match="boom"):
        manual.advance(5)
    assert manual.pending() == [("good", at(2))]
    assert clock() == at(1)
    assert manual.advance(4) == ["good"]


def test_manual_refuses_an_async_callback(manual: ManualScheduler) -> None:
    """A callback returning an awaitable raises a clear ``TypeError``, with no unawaited warning."""

    async def fire(eid: str) -> None:
        return None

    manual.start(fire)
    manual.schedule("x", at(0))
    with pytest.raises(TypeError, match="AsyncioScheduler"):
        manual.run_due()
    assert manual.pending() == []


def test_manual_refuses_negative_advance_and_a_foreign_clock(manual: ManualScheduler) -> None:
    """A negative advance, or a clock that is no ``ManualClock``, is an ``InvalidSettingsError``."""
    with pytest.raises(InvalidSettingsError, match="seconds must be >= 0"):
        manual.advance(-1)
    with pytest.raises(InvalidSettingsError, match="ManualClock"):
        ManualScheduler(real_now)  # type: ignore[arg-type]


def test_manual_shutdown_drops_alarms_and_stops_firing(manual: ManualScheduler) -> None:
    """After ``shutdown`` nothing is pending and a new alarm cannot fire until ``start``."""
    manual.start(Recorder())
    manual.schedule("x", at(1))
    manual.shutdown()
    assert manual.pending() == []
    manual.schedule("y", at(1))
    with pytest.raises(SchedulerStateError):
        manual.advance(1)


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.sampled_from("abcde"), st.integers(-5, 20)),
        st.tuples(st.just("cancel"), st.sampled_from("abcde"), st.just(0)),
    ),
    max_size=30,
)


@given(ops=ops_strategy, window=st.integers(0, 25))
def test_manual_matches_a_sorted_model(ops: list[tuple[str, str, int]], window: int) -> None:
    """For any script of schedules and cancels, advance fires the model's ids in due order."""
    clock = ManualClock(T0)
    manual = ManualScheduler(clock)
    times: list[datetime] = []
    manual.start(lambda eid: times.append(clock()))
    model: dict[str, tuple[int, int]] = {}
    for seq, (op, eid, seconds) in enumerate(ops):
        if op == "schedule":
            manual.schedule(eid, at(seconds))
            model[eid] = (seconds, seq)
        else:
            manual.cancel(eid)
            model.pop(eid, None)
    expected = sorted((key for key in model.items() if key[1][0] <= window), key=lambda i: i[1])
    assert manual.advance(window) == [eid for eid, _ in expected]
    assert times == [max(T0, at(seconds)) for _, (seconds, _) in expected]
    assert times == sorted(times)
    assert clock() == at(window)


reaction_strategy = st.tuples(
    st.sampled_from(("schedule", "cancel")), st.sampled_from("abcdefgh"), st.integers(0, 6)
)


@given(
    ops=st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.integers(-3, 12), st.booleans()), max_size=80
    ),
    reactions=st.dictionaries(
        st.sampled_from("abcdefgh"), st.lists(reaction_strategy, max_size=4), max_size=8
    ),
    window=st.integers(0, 15),
)
def test_manual_rearming_during_advance_matches_a_sorted_model(
    ops: list[tuple[str, int, bool]],
    reactions: dict[str, list[tuple[str, str, int]]],
    window: int,
) -> None:
    """Alarms armed, replaced or cancelled by callbacks fire exactly as a sorted model says."""
    clock = ManualClock(T0)
    manual = ManualScheduler(clock)
    seq = 0
    model: dict[str, tuple[datetime, int]] = {}

    def arm(eid: str, due: datetime) -> None:
        nonlocal seq
        manual.schedule(eid, due)
        model[eid] = (due, seq)
        seq += 1

    for eid, seconds, cancel in ops:  # many replacements: the queue compacts on the way
        if cancel:
            manual.cancel(eid)
            model.pop(eid, None)
        else:
            arm(eid, at(seconds))
    pending = {eid: list(steps) for eid, steps in reactions.items()}
    fired: list[tuple[str, datetime]] = []

    def fire(eid: str) -> None:
        fired.append((eid, clock()))
        model.pop(eid)
        steps = pending.get(eid)
        if steps:
            op, other, seconds = steps.pop(0)
            if op == "cancel":
                manual.cancel(other)
                model.pop(other, None)
            else:
                arm(other, clock() + timedelta(seconds=seconds))

    manual.start(fire)
    expected_pending = dict(model)
    replay = {eid: list(steps) for eid, steps in reactions.items()}
    expected: list[tuple[str, datetime]] = []
    now, end, model_seq = T0, at(window), seq
    while expected_pending:
        eid, (due, _) = min(expected_pending.items(), key=lambda item: item[1])
        if due > end:
            break
        del expected_pending[eid]
        now = max(now, due)
        expected.append((eid, now))
        steps = replay.get(eid)
        if steps:
            op, other, seconds = steps.pop(0)
            if op == "cancel":
                expected_pending.pop(other, None)
            else:
                expected_pending[other] = (now + timedelta(seconds=seconds), model_seq)
                model_seq += 1
    assert manual.advance(window) == [eid for eid, _ in expected]
    assert fired == expected
    assert manual.pending() == sorted(
        ((eid, due) for eid, (due, _) in model.items()), key=lambda item: model[item[0]]
    )


def test_manual_compacting_inside_a_callback_keeps_firing_in_order() -> None:
    """A callback that re-arms an alarm many times (compacting the queue) loses no alarm."""
    clock = ManualClock(T0)
    manual = ManualScheduler(clock)
    fired: list[str] = []

    def fire(eid: str) -> None:
        fired.append(eid)
        if eid == "a":
            for _ in range(60):  # each replaces the last: stale entries pile up, compacted
                manual.schedule("z", at(3))
            manual.schedule("z", at(4))  # due times first seen after compacting
            manual.schedule("y", T0 + timedelta(seconds=1.5))

    manual.start(fire)
    for eid, seconds in (("a", 1), ("b", 1), ("c", 2), ("d", 5), ("e", 9)):
        manual.schedule(eid, at(seconds))
    assert manual.advance(6) == ["a", "b", "y", "c", "z", "d"]
    assert manual.pending() == [("e", at(9))]


# --- AsyncioScheduler --------------------------------------------------------------------


async def wait_until(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), TIMEOUT)


def test_asyncio_start_inside_the_running_loop_and_async_fire_runs_as_task() -> None:
    """Started inside a running loop, it fires, and an awaitable result runs as a task."""

    async def main() -> list[str]:
        done = asyncio.Event()
        seen: list[str] = []

        async def resume(eid: str) -> None:
            await asyncio.sleep(0)
            seen.append(eid)
            done.set()

        scheduler = AsyncioScheduler()
        scheduler.start(resume)
        scheduler.schedule("x", real_now() + timedelta(milliseconds=10))
        await wait_until(done)
        scheduler.shutdown()
        return seen

    assert asyncio.run(main()) == ["x"]


def test_asyncio_start_without_a_loop_is_a_clear_error() -> None:
    """``start`` outside a running loop, with no ``loop=``, raises ``SchedulerStateError``."""
    with pytest.raises(SchedulerStateError, match="no running event loop"):
        AsyncioScheduler().start(Recorder())


def test_asyncio_start_twice_is_a_clear_error() -> None:
    """A second ``start`` without ``shutdown`` raises ``SchedulerStateError``."""

    async def main() -> None:
        scheduler = AsyncioScheduler()
        scheduler.start(Recorder())
        try:
            with pytest.raises(SchedulerStateError, match="already started"):
                scheduler.start(Recorder())
        finally:
            scheduler.shutdown()

    asyncio.run(main())


def test_asyncio_failures_are_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """A raising callback and a failing task are logged; later alarms still fire."""

    async def main() -> None:
        done = asyncio.Event()

        async def failing() -> None:
            raise RuntimeError("task boom")

        def fire(eid: str) -> object:
            if eid == "raises":
                raise RuntimeError("sync boom")
            if eid == "fails":
                return failing()
            done.set()
            return None

        scheduler = AsyncioScheduler()
        scheduler.start(fire)
        now = real_now()
        scheduler.schedule("raises", now + timedelta(milliseconds=5))
        scheduler.schedule("fails", now + timedelta(milliseconds=10))
        scheduler.schedule("ok", now + timedelta(milliseconds=40))
        await wait_until(done)
        scheduler.shutdown()

    with caplog.at_level(logging.ERROR, logger="scheduling.adapters.asyncio"):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert any("'raises'" in m for m in messages), messages
    assert any("'fails'" in m for m in messages), messages


def test_asyncio_schedule_from_another_thread() -> None:
    """``schedule`` called from a worker thread while the loop runs is handed to the loop."""

    async def main() -> list[str]:
        done = asyncio.Event()
        recorder = Recorder(then=lambda eid: done.set())
        scheduler = AsyncioScheduler()
        scheduler.start(recorder)
        await asyncio.to_thread(
            scheduler.schedule, "threaded", real_now() + timedelta(milliseconds=10)
        )
        await asyncio.to_thread(scheduler.cancel, "nobody")
        await wait_until(done)
        scheduler.shutdown()
        return recorder.ids

    assert asyncio.run(main()) == ["threaded"]


def test_asyncio_converts_due_times_with_the_given_clock() -> None:
    """Delays are measured on the injected clock: a clock a day ahead still fires in ms."""

    async def main() -> list[str]:
        done = asyncio.Event()
        clock = ManualClock(real_now() + timedelta(days=1))
        recorder = Recorder(then=lambda eid: done.set())
        scheduler = AsyncioScheduler(clock=clock)
        scheduler.start(recorder)
        scheduler.schedule("x", clock() + timedelta(milliseconds=10))
        await wait_until(done)
        scheduler.shutdown()
        return recorder.ids

    assert asyncio.run(main()) == ["x"]


def test_asyncio_shutdown_after_the_loop_closed_is_quiet() -> None:
    """``shutdown`` after its loop closed drops the alarms without raising."""
    loop = asyncio.new_event_loop()
    scheduler = AsyncioScheduler(loop=loop)
    scheduler.start(Recorder())
    scheduler.schedule("x", real_now() + timedelta(seconds=60))
    loop.close()
    scheduler.shutdown()
    scheduler.shutdown()  # idempotent


# --- APSchedulerAdapter -------------------------------------------------------------------


@pytest.fixture
def adapter() -> Iterator[APSchedulerAdapter]:
    a = APSchedulerAdapter()
    yield a
    a.shutdown()


def test_aps_job_shape(adapter: APSchedulerAdapter) -> None:
    """A job is a date trigger with a stable id, no grace limit, coalescing, and string args."""
    adapter.start(Recorder())
    due = real_now() + timedelta(hours=1)
    adapter.schedule("exec-1", due)
    adapter.schedule("exec-1", due + timedelta(hours=1))
    jobs = adapter.scheduler.get_jobs()
    assert [job.id for job in jobs] == ["prana:exec-1"] == [job_id("exec-1")]
    job = jobs[0]
    assert job.trigger.run_date == due + timedelta(hours=1)
    assert job.misfire_grace_time is None
    assert job.coalesce is True
    assert job.max_instances > 1000
    assert job.args == ("exec-1", adapter.name)
    assert all(isinstance(arg, str) for arg in job.args)
    assert job.kwargs == {}
    assert job.func_ref == "scheduling.adapters.apscheduler:_fire_job"


def test_aps_past_due_job_still_fires(adapter: APSchedulerAdapter) -> None:
    """A job due a minute ago fires: APScheduler's 1 s misfire grace does not drop it."""
    fired = threading.Event()
    adapter.start(lambda eid: fired.set())
    adapter.schedule("late", real_now() - timedelta(minutes=1))
    assert fired.wait(TIMEOUT)


def test_aps_background_runs_an_async_callback(adapter: APSchedulerAdapter) -> None:
    """In background mode an awaitable returned by the callback is run to completion."""
    fired = threading.Event()

    async def resume(eid: str) -> None:
        await asyncio.sleep(0)
        fired.set()

    adapter.start(resume)
    adapter.schedule("x", real_now() + timedelta(milliseconds=20))
    assert fired.wait(TIMEOUT)


def test_aps_callback_error_does_not_stop_other_alarms(
    adapter: APSchedulerAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    """A raising callback is logged by APScheduler and later alarms still fire."""
    done = threading.Event()

    def fire(eid: str) -> None:
        if eid == "bad":
            raise RuntimeError("boom")
        done.set()

    adapter.start(fire)
    with caplog.at_level(logging.ERROR, logger="apscheduler"):
        adapter.schedule("bad", real_now() + timedelta(milliseconds=10))
        adapter.schedule("good", real_now() + timedelta(milliseconds=60))
        assert done.wait(TIMEOUT)
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


def test_aps_asyncio_mode_starts_in_the_running_loop() -> None:
    """``mode="asyncio"`` runs jobs on the running loop and awaits an async callback."""

    async def main() -> list[str]:
        done = asyncio.Event()
        seen: list[str] = []

        async def resume(eid: str) -> None:
            seen.append(eid)
            done.set()

        adapter = APSchedulerAdapter(mode="asyncio")
        adapter.start(resume)
        assert adapter.scheduler.get_jobs() == []
        adapter.schedule("x", real_now() + timedelta(milliseconds=20))
        await wait_until(done)
        adapter.shutdown()
        await asyncio.sleep(0)  # the AsyncIOScheduler's shutdown runs on the loop
        return seen

    assert asyncio.run(main()) == ["x"]


def test_aps_asyncio_mode_without_a_loop_is_a_clear_error() -> None:
    """``mode="asyncio"`` started outside a running loop raises ``SchedulerStateError``."""
    adapter = APSchedulerAdapter(mode="asyncio")
    with pytest.raises(SchedulerStateError, match="no running event loop"):
        adapter.start(Recorder())
    # The failed start released the name: a twin fails for the loop, not the name.
    other = APSchedulerAdapter(mode="asyncio", name=adapter.name)
    with pytest.raises(SchedulerStateError, match="no running event loop"):
        other.start(Recorder())


def test_aps_bad_options_are_refused() -> None:
    """An unknown mode, a non-scheduler and an empty name raise ``InvalidSettingsError``."""
    with pytest.raises(InvalidSettingsError, match="mode="):
        APSchedulerAdapter(mode="thread")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="scheduler="):
        APSchedulerAdapter(object())
    with pytest.raises(InvalidSettingsError, match="name="):
        APSchedulerAdapter(name="")


def test_aps_two_started_adapters_cannot_share_a_name(adapter: APSchedulerAdapter) -> None:
    """A second adapter started under a name already in use raises ``SchedulerStateError``."""
    adapter.start(Recorder())
    twin = APSchedulerAdapter(name=adapter.name)
    with pytest.raises(SchedulerStateError, match="different name"):
        twin.start(Recorder())
    with pytest.raises(SchedulerStateError, match="already started"):
        adapter.start(Recorder())


def test_aps_orphan_job_is_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """A job whose adapter is not running logs a warning instead of failing."""
    with caplog.at_level(logging.WARNING, logger="scheduling.adapters.apscheduler"):
        aps_module._fire_job("x", "adapter-that-is-gone")
    assert "adapter-that-is-gone" in caplog.text
    assert "re-arms" in caplog.text


def test_aps_jobstore_is_added_and_kept_over_shutdown() -> None:
    """A ``jobstore=`` is added under ``"prana"``; its jobs survive ``shutdown`` (persistence)."""

    class KeepingJobStore(MemoryJobStore):  # type: ignore[misc]  # APScheduler is untyped
        """Stands in for a persistent store: shutting it down keeps its jobs."""

        def shutdown(self) -> None:
            pass

    store = KeepingJobStore()
    adapter = APSchedulerAdapter(jobstore=store, name="persisted")
    adapter.start(Recorder())
    adapter.schedule("x", real_now() + timedelta(hours=1))
    assert [job.id for job in adapter.scheduler.get_jobs(jobstore="prana")] == ["prana:x"]
    adapter.cancel("x")
    adapter.schedule("y", real_now() + timedelta(hours=1))
    adapter.shutdown()
    assert [job.id for job in store.get_all_jobs()] == ["prana:y"]


def test_aps_stopped_adapter_keeps_one_queued_job_per_id() -> None:
    """Before ``start``, scheduling an id twice queues one job, and ``cancel`` removes it."""
    adapter = APSchedulerAdapter(BackgroundScheduler(timezone=UTC))
    adapter.schedule("x", real_now() + timedelta(hours=1))
    adapter.schedule("x", real_now() + timedelta(hours=2))
    assert len(adapter.scheduler.get_jobs()) == 1
    adapter.cancel("x")
    assert adapter.scheduler.get_jobs() == []


def test_aps_user_scheduler_is_left_running() -> None:
    """A scheduler the user started is not shut down by the adapter's ``shutdown``."""
    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.start()
    try:
        adapter = APSchedulerAdapter(scheduler, jobstore=MemoryJobStore())
        fired = threading.Event()
        adapter.start(lambda eid: fired.set())
        adapter.schedule("x", real_now() + timedelta(milliseconds=10))
        assert fired.wait(TIMEOUT)
        adapter.shutdown()
        assert scheduler.running
    finally:
        stop_scheduler(scheduler)


def test_aps_user_asyncio_scheduler_with_its_loop_starts_outside_it() -> None:
    """A user's ``AsyncIOScheduler(event_loop=loop)`` starts before the loop runs, then fires."""
    loop = asyncio.new_event_loop()
    adapter = APSchedulerAdapter(AsyncIOScheduler(timezone=UTC, event_loop=loop))
    done = asyncio.Event()
    recorder = Recorder(then=lambda eid: done.set())
    adapter.start(recorder)
    adapter.schedule("x", real_now() + timedelta(milliseconds=20))
    try:
        loop.run_until_complete(wait_until(done))
        assert recorder.ids == ["x"]
        adapter.shutdown()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


def test_aps_user_scheduler_cannot_restart_after_the_adapter_shut_it_down() -> None:
    """Restarting over a user's scheduler that the adapter shut down raises, naming the fix."""
    adapter = APSchedulerAdapter(BackgroundScheduler(timezone=UTC))
    adapter.start(Recorder())
    adapter.shutdown()
    with pytest.raises(SchedulerStateError, match="cannot restart"):
        adapter.start(Recorder())
    fresh = APSchedulerAdapter(name=adapter.name)  # the failed start released the name
    fresh.start(Recorder())
    fresh.shutdown()


def test_aps_shutdown_right_after_a_fire_keeps_the_scheduler_thread_alive() -> None:
    """Shutting down just after a job fired never kills APScheduler's thread mid-pass."""
    for i in range(20):
        adapter = APSchedulerAdapter(jobstore=MemoryJobStore())
        recorder = Recorder()
        adapter.start(recorder)
        adapter.schedule(f"x{i}", real_now() - timedelta(seconds=1))
        assert recorder.wait_threaded(1)
        adapter.shutdown()  # an unhandled thread error would fail this test


def test_aps_shutdown_waits_for_the_alarm_firing_now() -> None:
    """``shutdown`` returns only once an alarm firing at that moment has finished.

    A runner closes its store right after (a worker stopping on SIGTERM): an alarm still
    running then would write to a closed store.
    """
    adapter = APSchedulerAdapter()
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow(execution_id: str) -> None:
        started.set()
        release.wait(10)
        order.append("fire done")

    adapter.start(slow)
    adapter.schedule("slow", real_now() - timedelta(seconds=1))
    assert started.wait(10)

    def stop() -> None:
        adapter.shutdown()
        order.append("shutdown returned")

    stopping = threading.Thread(target=stop)
    stopping.start()
    deadline = time.monotonic() + 10
    while adapter.name in aps_module._FIRES and time.monotonic() < deadline:
        threading.Event().wait(0.001)  # until shutdown has begun (it unregisters first)
    release.set()
    stopping.join(10)
    assert order == ["fire done", "shutdown returned"]


def test_aps_shutdown_from_inside_an_alarm_does_not_wait_for_itself() -> None:
    """An alarm that shuts its own scheduler down is not waited for (no deadlock)."""
    adapter = APSchedulerAdapter()
    done = threading.Event()

    def stop_from_inside(execution_id: str) -> None:
        adapter.shutdown()
        done.set()

    adapter.start(stop_from_inside)
    adapter.schedule("self", real_now() - timedelta(seconds=1))
    assert done.wait(10)
