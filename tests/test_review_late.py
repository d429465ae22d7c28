"""Late review: transactional alarms, executor entry checks, activation sources.

Some tests pin the bugs that review found (each fixed since; the test keeps it fixed), the
others pin verified behaviour that had no test of its own. The transactional-alarm tests
use duck-typed doubles of ``PostgresStore``/``ProcrastinateScheduler`` (the ``Runner``
detects the pair by their attributes), so they need no database.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from doubles import Flaky

from prana import (
    Completed,
    Connection,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeSettings,
    Registry,
    RetryPolicy,
    Suspend,
    Workflow,
    WorkflowExecution,
    cancel_execution,
    dumps,
    execute_workflow,
    loads,
)
from prana.testing import ManualClock
from scheduling import Runner
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.memory import MemoryStore

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


# -- helpers -----------------------------------------------------------------------------


def webhook_workflow(timeout: str | None = "1h") -> Workflow:
    """A trigger then a webhook wait (expiring after ``timeout`` unless ``None``)."""
    params: dict[str, Any] = {"mode": "webhook"}
    if timeout is not None:
        params["timeout"] = timeout
    return Workflow(
        id="hook",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="w", type="wait.wait", params=params),
        ],
        connections=[Connection(from_node="start", to_node="w")],
    )


def retry_workflow() -> Workflow:
    return Workflow(
        id="retry",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(
                key="x",
                type="t.flaky",
                settings=NodeSettings(
                    retry=RetryPolicy(max_attempts=3, backoff="constant", initial_delay=1.0)
                ),
            ),
        ],
        connections=[Connection(from_node="start", to_node="x")],
    )


class HookStore(MemoryStore):
    """A ``MemoryStore`` with ``PostgresStore``'s ``dsn`` and ``on_save`` hook slot.

    The hook runs before the row is stored; if it raises, nothing is stored (the
    all-or-nothing promise of ``PostgresStore.on_save``).
    """

    def __init__(self, *, fail_alarms: bool = False) -> None:
        super().__init__()
        self.dsn = "host=db dbname=prana"
        self.on_save: Any = None
        self.fail_alarms = fail_alarms

    def save(self, execution: WorkflowExecution, expected_version: int | None) -> int:
        hook = self.on_save
        if hook is not None:
            hook(None, execution)
        return super().save(execution, expected_version)

    def alarms(self) -> Any:
        if self.fail_alarms:
            raise ConnectionError("database went away")
        return super().alarms()


class InTransactionScheduler(ManualScheduler):
    """A ``ManualScheduler`` with ``ProcrastinateScheduler``'s in-transaction arming API."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.outside: list[tuple[str, str]] = []
        self.inside: list[tuple[str, str]] = []

    def same_database(self, dsn: str) -> bool:
        return dsn == "host=db dbname=prana"

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        self.outside.append(("schedule", execution_id))
        super().schedule(execution_id, due_at)

    def cancel(self, execution_id: str) -> None:
        self.outside.append(("cancel", execution_id))
        super().cancel(execution_id)

    def schedule_in(self, conn: Any, execution_id: str, due_at: datetime) -> None:
        self.inside.append(("schedule", execution_id))
        super().schedule(execution_id, due_at)

    def cancel_in(self, conn: Any, execution_id: str) -> None:
        self.inside.append(("cancel", execution_id))
        super().cancel(execution_id)


class NaiveClockScheduler:
    """A minimal ``Scheduler`` whose clock returns naive datetimes (a misconfiguration)."""

    def clock(self) -> datetime:
        return datetime(2030, 1, 1, 12)  # noqa: DTZ001 - naive on purpose

    def start(self, fire: Any) -> None:
        del fire

    def schedule(self, execution_id: str, due_at: datetime) -> None:
        del execution_id, due_at

    def cancel(self, execution_id: str) -> None:
        del execution_id

    def shutdown(self) -> None:
        pass


class PendulumLike(datetime):
    """A datetime subclass, as ``pendulum.DateTime`` is."""


# -- transactional alarms (Runner + on_save hook) ------------------------------------------


def test_runner_arms_every_retry_inside_the_save_and_removes_the_hook_on_close() -> None:
    """With the hook installed every alarm change happens in a save; close() uninstalls it."""
    clock = ManualClock(T0)
    registry = Registry()
    flaky = Flaky(2)
    registry.register("t.flaky", flaky)
    store = HookStore()
    scheduler = InTransactionScheduler(clock)
    runner = Runner(store=store, scheduler=scheduler, registry=registry, clock=clock)
    with runner:
        assert store.on_save is not None
        execution_id = runner.start(retry_workflow())
        assert runner.get(execution_id).status is ExecutionStatus.SUSPENDED
        scheduler.advance(1)
        scheduler.advance(1)
        assert runner.get(execution_id).status is ExecutionStatus.COMPLETED
        assert scheduler.outside == []
        assert ("schedule", execution_id) in scheduler.inside
        assert scheduler.inside[-1] == ("cancel", execution_id)
    assert store.on_save is None
    assert flaky.calls == 3


def test_second_runner_over_a_hooked_store_arms_after_its_saves() -> None:
    """A runner finding the hook slot taken arms its own alarms after the save, as before."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("t.flaky", Flaky(1))
    store = HookStore()
    first = InTransactionScheduler(clock)
    second = InTransactionScheduler(clock)
    with Runner(store=store, scheduler=first, registry=registry, clock=clock):
        hook = store.on_save
        with Runner(store=store, scheduler=second, registry=registry, clock=clock) as runner:
            assert store.on_save is hook
            execution_id = runner.start(retry_workflow())
            assert ("schedule", execution_id) in second.outside
        assert store.on_save is hook  # the second runner leaves the first one's hook alone
    assert store.on_save is None


def test_a_failing_hook_stores_nothing_and_start_raises() -> None:
    """When arming inside the save fails, start() raises and no execution is stored."""
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("t.flaky", Flaky(5))
    store = HookStore()
    scheduler = InTransactionScheduler(clock)

    def broken(conn: Any, execution_id: str, due_at: datetime) -> None:
        raise ConnectionError("job queue unreachable")

    scheduler.schedule_in = broken  # type: ignore[method-assign]
    with Runner(store=store, scheduler=scheduler, registry=registry, clock=clock) as runner:
        with pytest.raises(ConnectionError):
            runner.start(retry_workflow(), execution_id="e1")
        assert store.list(ExecutionStatus.SUSPENDED, limit=10) == []


def test_open_that_fails_leaves_no_hook_on_the_store() -> None:
    """A Runner.open() that raises leaves the store as it found it (no on_save hook)."""
    clock = ManualClock(T0)
    store = HookStore(fail_alarms=True)
    runner = Runner(store=store, scheduler=InTransactionScheduler(clock), clock=clock)
    with pytest.raises(ConnectionError), runner:
        pass
    assert store.on_save is None


# -- executor entry checks -----------------------------------------------------------------


def suspended_webhook() -> WorkflowExecution:
    outcome = execute_workflow(
        webhook_workflow(), None, registry=Registry(), clock=ManualClock(T0), execution_id="e1"
    )
    assert isinstance(outcome, Suspend)
    assert outcome.execution is not None
    return outcome.execution


def test_cancel_execution_refuses_a_naive_clock() -> None:
    """cancel_execution checks its clock like every other executor entry point."""
    with pytest.raises(InvalidSettingsError, match="clock"):
        cancel_execution(suspended_webhook(), clock=lambda: datetime(2030, 1, 2))  # noqa: DTZ001


@pytest.mark.parametrize(
    "kwargs",
    [{"observers": print}, {"observers": "abc"}, {"clock": 5}],
    ids=["one-observer", "str-observers", "clock-int"],
)
def test_cancel_execution_checks_its_arguments(kwargs: dict[str, Any]) -> None:
    """Bad observers= or clock= for cancel_execution raise InvalidSettingsError."""
    with pytest.raises(InvalidSettingsError):
        cancel_execution(suspended_webhook(), **kwargs)


def test_execution_from_a_datetime_subclass_clock_round_trips() -> None:
    """A clock returning an aware datetime subclass gives executions that dumps/loads."""
    outcome = execute_workflow(
        webhook_workflow(),
        None,
        registry=Registry(),
        clock=lambda: PendulumLike(2030, 1, 1, tzinfo=timezone.utc),
    )
    assert outcome.execution is not None
    assert loads(dumps(outcome.execution)) == outcome.execution


def test_runner_deliver_refuses_a_naive_clock_clearly() -> None:
    """A runner whose clock is naive is refused when built, naming the clock, before any use."""
    store = MemoryStore()
    clock = ManualClock(T0)
    with Runner(store=store, scheduler=ManualScheduler(clock), clock=clock) as first:
        execution_id = first.start(webhook_workflow())
    with pytest.raises(InvalidSettingsError, match="clock"):
        Runner(store=store, scheduler=NaiveClockScheduler())
    assert store.load(execution_id)[0].status is ExecutionStatus.SUSPENDED


def test_env_as_a_mapping_proxy_is_accepted() -> None:
    """A read-only MappingProxyType env passes the entry checks and reaches templates."""
    from types import MappingProxyType

    registry = Registry()
    registry.register("t.echo", lambda params, ctx: params)
    wf = Workflow(
        id="env",
        nodes=[
            Node(key="start", type="manual.trigger"),
            Node(key="e", type="t.echo", params={"v": "{{ $env.K }}"}),
        ],
        connections=[Connection(from_node="start", to_node="e")],
    )
    outcome = execute_workflow(
        wf, None, registry=registry, clock=ManualClock(T0), env=MappingProxyType({"K": "x"})
    )
    assert isinstance(outcome, Completed)
    assert outcome.output == {"v": "x"}
