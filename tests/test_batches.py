"""Batches: alarms due at one instant handed over at once, their saves grouped in the store.

Three parts: the ``GroupingStore`` conformance suite (every store that offers it), the
``BatchingScheduler`` conformance suite (every scheduler that offers it), and a ``Runner``
that resumes a batch in one group, keeping its durability rules (a claim is durable before
its action runs; settling waits for the commit).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from doubles import T0, fails_first, flaky_node, sub_node, workflow

from prana import ActionContext, ExecutionStatus, Node, Registry, Suspend, cancel_execution
from prana.testing import ManualClock
from scheduling import Runner, StaleVersionError, StoreError
from scheduling.abc import BatchingScheduler, GroupingStore
from scheduling.adapters.apscheduler import BUCKET_ID_PREFIX, APSchedulerAdapter
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores.sqlite import SQLiteStore
from scheduling.testing import execution, retry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from scheduling.abc import ExecutionStore

UTC = timezone.utc
TIMEOUT = 10.0


# -- GroupingStore: every store that offers it ---------------------------------------------


class SQLiteGroup:
    """A ``SQLiteStore`` on a file, and a second store on the same file (another connection)."""

    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "grouped.sqlite3"
        self.store = SQLiteStore(self.path)
        self.other = SQLiteStore(self.path, cache_size=0)

    def close(self) -> None:
        self.store.close()
        self.other.close()


class PostgresGroup:
    """A ``PostgresStore`` in a schema of its own, and a second store on it (another pool)."""

    name = "postgres"

    def __init__(self, tmp_path: Path, dsn: str) -> None:
        from scheduling.stores.postgres import PostgresStore

        del tmp_path
        self.dsn = dsn
        self.schema = f"prana_group_{uuid.uuid4().hex[:12]}"
        self.store = PostgresStore(dsn, schema=self.schema)
        self.other = PostgresStore(dsn, schema=self.schema, cache_size=0)

    def close(self) -> None:
        self.store.close()
        self.other.close()
        drop_schema(self.dsn, self.schema)


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


GROUPING = [
    pytest.param(SQLiteGroup, id="sqlite"),
    pytest.param(PostgresGroup, id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=GROUPING)
def grouping(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param is PostgresGroup:
        group = PostgresGroup(tmp_path, request.getfixturevalue("postgres_dsn"))
    else:
        group = request.param(tmp_path)
    yield group
    group.close()


def stored_version(store: ExecutionStore, eid: str) -> int:
    return store.load(eid)[1]


def test_every_grouping_store_satisfies_the_protocol(grouping: Any) -> None:
    assert isinstance(grouping.store, GroupingStore)


def test_grouped_saves_are_seen_elsewhere_only_from_the_commit(grouping: Any) -> None:
    """Inside a group each save returns its version; other connections see them at the commit."""
    store, other = grouping.store, grouping.other
    for eid in ("a", "b"):
        store.save(retry(eid, T0), None)
    with store.grouped():
        assert store.save(retry("a", T0 + timedelta(seconds=1)), 1) == 2
        assert store.save(retry("b", T0 + timedelta(seconds=1)), 1) == 2
        assert store.load("a")[1] == 2  # the thread's own loads see its saves
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(stored_version(other, "a")))
        reader.start()  # another connection: it sees the last commit
        reader.join(TIMEOUT)
        assert seen == [1]
        store.commit_group()
        assert stored_version(other, "a") == 2
        assert stored_version(other, "b") == 2
        assert store.save(retry("a", T0 + timedelta(seconds=2)), 2) == 3
    assert stored_version(other, "a") == 3  # leaving the block commits the rest


def test_a_grouped_save_checks_its_compare_and_set_at_once(grouping: Any) -> None:
    store, other = grouping.store, grouping.other
    store.save(retry("a", T0), None)
    with store.grouped():
        store.save(retry("a", T0 + timedelta(seconds=1)), 1)
        with pytest.raises(StaleVersionError):
            store.save(retry("a", T0 + timedelta(seconds=2)), 1)
        store.save(execution("c"), None)
        with pytest.raises(StaleVersionError):
            store.save(execution("c"), None)
    assert stored_version(other, "a") == 2
    assert stored_version(other, "c") == 1


def test_leaving_a_group_by_an_error_still_commits_what_it_saved(grouping: Any) -> None:
    store, other = grouping.store, grouping.other
    store.save(retry("a", T0), None)

    def fail_inside() -> None:
        with store.grouped():
            store.save(retry("a", T0 + timedelta(seconds=1)), 1)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert stored_version(other, "a") == 2


def test_groups_nest_into_the_outer_one_and_other_threads_are_not_grouped(
    grouping: Any,
) -> None:
    """An inner block commits nothing; a save from another thread commits on its own."""
    store, other = grouping.store, grouping.other
    store.save(retry("a", T0), None)
    store.save(retry("b", T0), None)
    with store.grouped():
        with store.grouped():
            store.save(retry("a", T0 + timedelta(seconds=1)), 1)
        assert stored_version(store, "a") == 2
        store.commit_group()  # so the other thread's save does not wait for this one
        writer = threading.Thread(target=lambda: store.save(retry("b", T0), 1))
        writer.start()
        writer.join(TIMEOUT)
        assert stored_version(other, "b") == 2
    assert stored_version(other, "a") == 2


def test_a_definition_saved_inside_a_group_joins_it(grouping: Any) -> None:
    store, other = grouping.store, grouping.other
    definition = workflow(wid="grouped")
    with store.grouped():
        store.save(execution("a"), None)
        store.save_workflow(definition)
        assert store.load_workflow("grouped", 1) == definition
    assert other.load_workflow("grouped", 1) == definition
    assert stored_version(other, "a") == 1


@pytest.mark.postgres
def test_a_postgres_group_whose_save_fails_is_rolled_back_whole(postgres_dsn: str) -> None:
    """A hook that raises inside a group: that save and the group's earlier ones are lost,
    later saves of the group refuse, the commit says so, and the next group works."""
    group = PostgresGroup(Path("."), postgres_dsn)
    store, other = group.store, group.other
    try:
        for eid in ("a", "b", "c"):
            store.save(retry(eid, T0), None)

        def hook(conn: Any, saved: Any) -> None:
            if saved.id == "b":
                raise RuntimeError("hook failed")

        store.on_save = hook

        def group_with_a_failing_save() -> None:
            with store.grouped():
                assert store.save(retry("a", T0 + timedelta(seconds=1)), 1) == 2
                with pytest.raises(RuntimeError, match="hook failed"):
                    store.save(retry("b", T0 + timedelta(seconds=1)), 1)
                with pytest.raises(StoreError, match="refused"):
                    store.save(retry("c", T0 + timedelta(seconds=1)), 1)

        with pytest.raises(StoreError, match="rolled back"):
            group_with_a_failing_save()
        assert [stored_version(other, eid) for eid in ("a", "b", "c")] == [1, 1, 1]
        assert store.load("a")[1] == 1  # nothing cached of what was rolled back
        with store.grouped():
            assert store.save(retry("c", T0 + timedelta(seconds=1)), 1) == 2
        assert stored_version(other, "c") == 2
    finally:
        group.close()


@pytest.mark.postgres
def test_a_postgres_group_holds_one_connection_for_all_its_calls(postgres_dsn: str) -> None:
    """Loads and saves of a group share its connection: one pooled connection is enough."""
    from scheduling.stores.postgres import PostgresStore

    schema = f"prana_group_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(postgres_dsn, schema=schema, max_connections=1)
    try:
        store.save(retry("a", T0), None)
        with store.grouped():
            store.save(retry("a", T0 + timedelta(seconds=1)), 1)
            assert store.load("a")[1] == 2
            assert [eid for eid, _ in store.find_due(T0 + timedelta(days=1))] == ["a"]
            store.save_workflow(workflow(wid="one-connection"))
        assert store.load_workflow("one-connection", 1) == workflow(wid="one-connection")
    finally:
        store.close()
        drop_schema(postgres_dsn, schema)


@pytest.mark.postgres
def test_postgres_groups_leave_the_last_connection_to_lease_renewals(postgres_dsn: str) -> None:
    """With every connection but one held by groups (steps whose actions run), a save made
    outside any group (a lease renewal) still gets a connection at once, and the next group
    waits for a group to end instead of taking it.

    Groups took every connection, renewals waited past the lease, and other workers ran the
    live attempts a second time (APScheduler workers on PostgreSQL, 4 of 6 long attempts).
    """
    from scheduling.stores.postgres import PostgresStore

    schema = f"prana_group_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(postgres_dsn, schema=schema, max_connections=2)
    held, release = threading.Event(), threading.Event()
    second_in = threading.Event()
    errors: list[StoreError] = []

    def group(eid: str, entered: threading.Event) -> None:
        try:
            with store.grouped():
                store.save(retry(eid, T0 + timedelta(seconds=1)), 1)
                store.commit_group()
                entered.set()
                release.wait(10)
        except StoreError as error:  # reported below
            errors.append(error)

    try:
        for eid in ("a", "b", "c"):
            store.save(retry(eid, T0), None)
        first = threading.Thread(target=group, args=("a", held))
        first.start()
        assert held.wait(10)
        second = threading.Thread(target=group, args=("b", second_in))
        second.start()
        assert not second_in.wait(0.5)  # it waits for a group slot: the last connection is free
        started = time.monotonic()
        assert store.save(retry("c", T0 + timedelta(seconds=1)), 1) == 2  # a renewal's save
        assert time.monotonic() - started < 2
        release.set()
        first.join(10)
        assert second_in.wait(10)
        second.join(10)
        assert errors == []
    finally:
        release.set()
        store.close()
        drop_schema(postgres_dsn, schema)


@pytest.mark.postgres
@pytest.mark.parametrize("group_commits", ["async", "sync"])
def test_only_a_postgres_groups_commits_skip_the_wait_for_the_disk(
    postgres_dsn: str, group_commits: str
) -> None:
    """The speed rule of groups (``_BEGIN_ASYNC_GROUP``): ``synchronous_commit`` is off in a
    group's transactions only (with ``group_commits="async"``, an opt-in); every save
    outside a group waits for the disk."""
    from scheduling.stores.postgres import PostgresStore

    schema = f"prana_group_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(postgres_dsn, schema=schema, group_commits=group_commits)
    seen: dict[str, str] = {}

    def hook(conn: Any, saved: Any) -> None:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        seen[saved.id] = row[0]

    store.on_save = hook
    try:
        store.save(retry("alone", T0), None)
        with store.grouped():
            store.save(retry("grouped", T0), None)
        store.save(retry("after", T0), None)
    finally:
        store.close()
        drop_schema(postgres_dsn, schema)
    in_group = "off" if group_commits == "async" else "on"
    assert seen == {"alone": "on", "grouped": in_group, "after": "on"}


def test_postgres_group_commits_wait_for_the_disk_unless_asked_not_to() -> None:
    """Durable by default (nothing acknowledged is taken back by a server crash); the
    ``group_commits`` attribute (what ``prana worker --async-commits`` sets) switches the
    group's ``BEGIN`` and is checked like the argument."""
    from prana import InvalidSettingsError
    from scheduling.stores.postgres import PostgresStore

    store = PostgresStore("postgresql://localhost/x")
    assert store.group_commits == "sync"
    assert "synchronous_commit" not in store._begin_group
    store.group_commits = "async"
    assert "synchronous_commit TO off" in store._begin_group
    with pytest.raises(InvalidSettingsError, match="group_commits='later'"):
        store.group_commits = "later"
    assert store.group_commits == "async"


def test_postgres_group_commits_must_be_async_or_sync() -> None:
    from prana import InvalidSettingsError
    from scheduling.stores.postgres import PostgresStore

    with pytest.raises(InvalidSettingsError, match="group_commits="):
        PostgresStore("postgresql://localhost/x", group_commits="later")


@pytest.mark.postgres
def test_a_postgres_grouped_claim_joins_the_group(postgres_dsn: str) -> None:
    """A light claim in a group is in the group's transaction: seen elsewhere at the commit."""
    group = PostgresGroup(Path("."), postgres_dsn)
    store, other = group.store, group.other
    try:
        store.save(retry("a", T0), None)
        with store.grouped():
            assert store.claim("a", 1, T0 + timedelta(seconds=30), T0) == 2
            assert store.load("a")[0].status is ExecutionStatus.RUNNING
            assert stored_version(other, "a") == 1
            store.commit_group()
            assert stored_version(other, "a") == 2
        claimed = other.load("a")[0]
        assert claimed.status is ExecutionStatus.RUNNING
        assert claimed.suspension is not None  # a claim, not a checkpoint
    finally:
        group.close()


@pytest.mark.postgres
def test_a_prefetched_row_serves_one_load_of_its_thread(postgres_dsn: str) -> None:
    """``PostgresStore.prefetch``: one query for a batch; each row serves the thread's next
    load of its id once; a save drops it; a stale one is refused by the compare-and-set."""
    group = PostgresGroup(Path("."), postgres_dsn)
    store, other = group.store, group.other
    try:
        for eid in ("a", "b", "c"):
            store.save(retry(eid, T0), None)
        store.prefetch(["a", "b", "c", "unknown"])
        other.save(retry("a", T0 + timedelta(seconds=1)), 1)  # moved on after the prefetch
        assert store.load("a")[1] == 1  # the prefetched row, read before the change
        assert store.load("a")[1] == 2  # served once: now read from the table
        with pytest.raises(StaleVersionError):
            store.save(retry("a", T0 + timedelta(seconds=2)), 1)  # nothing stale is written
        store.save(retry("b", T0 + timedelta(seconds=1)), 1)
        other.save(retry("b", T0 + timedelta(seconds=2)), 2)
        assert store.load("b")[1] == 3  # the save dropped b's prefetched row
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(store.load("c")[1]))
        reader.start()
        reader.join(TIMEOUT)
        assert seen == [1]  # another thread reads the table (same version here)
        store.prefetch([])  # the end of the batch: c's row is dropped
        other.save(retry("c", T0 + timedelta(seconds=1)), 1)
        assert store.load("c")[1] == 2
    finally:
        group.close()


# -- BatchingScheduler: every scheduler that offers it ------------------------------------


class Batches:
    """Records ``fire`` and ``fire_many`` calls; ``wait(n)`` until ``n`` ids were handed over."""

    def __init__(self) -> None:
        self.singles: list[str] = []
        self.batches: list[list[str]] = []
        self._cond = threading.Condition()

    def fire(self, eid: str) -> None:
        with self._cond:
            self.singles.append(eid)
            self._cond.notify_all()

    def fire_many(self, ids: Sequence[str]) -> None:
        with self._cond:
            self.batches.append(list(ids))
            self._cond.notify_all()

    def count(self) -> int:
        return len(self.singles) + sum(len(b) for b in self.batches)

    def wait(self, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.count() >= n, timeout=TIMEOUT)


class ManualBatching:
    name = "manual-batches"

    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.scheduler = ManualScheduler(self.clock, batches=True)

    def now(self) -> datetime:
        return self.clock()

    def let_fire(self, batches: Batches, n: int) -> None:
        self.scheduler.advance(60)
        assert batches.count() >= n

    def close(self) -> None:
        self.scheduler.shutdown()


class APSBatching:
    name = "apscheduler-background"

    def __init__(self) -> None:
        self.scheduler = APSchedulerAdapter()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def let_fire(self, batches: Batches, n: int) -> None:
        assert batches.wait(n), f"only {batches.count()} of {n} fired"

    def close(self) -> None:
        self.scheduler.shutdown()


BATCHING = [ManualBatching, APSBatching]


@pytest.fixture(params=BATCHING, ids=lambda h: h.name)
def batching(request: pytest.FixtureRequest) -> Iterator[Any]:
    harness = request.param()
    yield harness
    harness.close()


def test_every_batching_scheduler_satisfies_the_protocol(batching: Any) -> None:
    assert isinstance(batching.scheduler, BatchingScheduler)


def test_alarms_due_at_one_instant_are_handed_over_in_one_call(batching: Any) -> None:
    """In arming order, each once; a cancelled one is left out, a re-armed one moves."""
    recorded = Batches()
    due = batching.now() + timedelta(milliseconds=300)
    scheduler = batching.scheduler
    scheduler.start_batched(recorded.fire, recorded.fire_many)
    for eid in ("a", "b", "c", "d", "e"):
        scheduler.schedule(eid, due)
    scheduler.schedule("b", due)  # armed again for the same instant: once, last
    scheduler.cancel("c")
    scheduler.schedule("d", due + timedelta(milliseconds=50))  # moved to its own instant
    batching.let_fire(recorded, 4)
    assert recorded.singles == []
    assert recorded.batches == [["a", "e", "b"], ["d"]]


def test_an_id_armed_again_after_its_batch_fired_fires_again(batching: Any) -> None:
    recorded = Batches()
    scheduler = batching.scheduler
    due = batching.now() + timedelta(milliseconds=100)
    scheduler.start_batched(recorded.fire, recorded.fire_many)
    scheduler.schedule("a", due)
    batching.let_fire(recorded, 1)
    scheduler.schedule("a", due)  # now overdue: it fires at once
    batching.let_fire(recorded, 2)
    assert recorded.batches == [["a"], ["a"]]


def test_a_bucket_cancelled_whole_fires_nothing(batching: Any) -> None:
    recorded = Batches()
    scheduler = batching.scheduler
    scheduler.start_batched(recorded.fire, recorded.fire_many)
    now = batching.now()
    scheduler.schedule("gone", now + timedelta(milliseconds=50))
    scheduler.cancel("gone")
    scheduler.schedule("kept", now + timedelta(milliseconds=150))
    batching.let_fire(recorded, 1)
    assert recorded.batches == [["kept"]]


def test_aps_keeps_one_job_per_instant_when_batched() -> None:
    """10 ids at one instant are one APScheduler job; shutdown removes it."""
    adapter = APSchedulerAdapter()
    recorded = Batches()
    adapter.start_batched(recorded.fire, recorded.fire_many)
    try:
        due = datetime.now(UTC) + timedelta(hours=1)
        for i in range(10):
            adapter.schedule(f"x{i}", due)
        jobs = adapter.scheduler.get_jobs()
        assert [job.id for job in jobs] == [BUCKET_ID_PREFIX + due.isoformat()]
        assert all(isinstance(arg, str) for arg in jobs[0].args)
    finally:
        adapter.shutdown()
    assert adapter.scheduler.get_jobs() == []


def test_aps_with_a_jobstore_keeps_a_job_per_execution_when_batched() -> None:
    from apscheduler.jobstores.memory import MemoryJobStore

    adapter = APSchedulerAdapter(jobstore=MemoryJobStore())
    recorded = Batches()
    adapter.start_batched(recorded.fire, recorded.fire_many)
    try:
        due = datetime.now(UTC) + timedelta(hours=1)
        adapter.schedule("x", due)
        assert [job.id for job in adapter.scheduler.get_jobs(jobstore="prana")] == ["prana:x"]
    finally:
        adapter.shutdown()


def test_aps_asyncio_mode_awaits_a_batch() -> None:
    async def main() -> list[list[str]]:
        done = asyncio.Event()
        seen: list[list[str]] = []

        async def fire_many(ids: Sequence[str]) -> None:
            seen.append(list(ids))
            done.set()

        adapter = APSchedulerAdapter(mode="asyncio")
        adapter.start_batched(lambda eid: None, fire_many)
        due = datetime.now(UTC) + timedelta(milliseconds=50)
        adapter.schedule("a", due)
        adapter.schedule("b", due)
        await asyncio.wait_for(done.wait(), TIMEOUT)
        adapter.shutdown()
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(main()) == [["a", "b"]]


def test_manual_batches_must_be_a_bool() -> None:
    from prana import InvalidSettingsError

    with pytest.raises(InvalidSettingsError, match="batches="):
        ManualScheduler(ManualClock(T0), batches="yes")  # type: ignore[arg-type]


# -- the Runner: a batch in one store group ------------------------------------------------


def batch_runner(
    store: SQLiteStore, action: Callable[[Any, ActionContext], Any], *, batches: bool = True
) -> tuple[Runner[ManualScheduler], ManualClock]:
    clock = ManualClock(T0)
    registry = Registry()
    registry.register("test.flaky", action)
    return Runner(registry, store, ManualScheduler(clock, batches=batches)), clock


@pytest.mark.parametrize("batches", [True, False], ids=["batched", "one-by-one"])
def test_a_batch_resumes_every_retry_once_each_claim_committed_before_its_action(
    tmp_path: Path, batches: bool
) -> None:
    """Each action sees its own claim, and the previous step's final save, committed.

    The same as one alarm at a time: same outcomes, same number of saves (versions).
    """
    path = tmp_path / "batch.sqlite3"
    watch = sqlite3.connect(path, check_same_thread=False)
    seen: list[tuple[str, str, int]] = []

    def action(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 2:  # the retry, run from the batch
            rows = dict(watch.execute("SELECT id, status FROM prana_executions").fetchall())
            done = sum(1 for status in rows.values() if status == "completed")
            seen.append((ctx.execution_id, rows[ctx.execution_id], done))
        return fails_first(params, ctx)

    store = SQLiteStore(path)
    runner, _ = batch_runner(store, action, batches=batches)
    try:
        with runner:
            wf = workflow(flaky_node(attempts=3, delay=5))
            ids = [runner.start(wf) for _ in range(5)]  # all due at T0 + 5 s
            assert runner.scheduler.advance(10) == ids
            for eid in ids:
                execution = runner.get(eid)
                assert execution.status is ExecutionStatus.COMPLETED
                assert len(execution.node_executions["r"][-1].attempts) == 2
            # one version per save: create, claim, suspend, claim, complete
            assert {store.load(eid)[1] for eid in ids} == {5}
    finally:
        store.close()
        watch.close()
    assert [eid for eid, _, _ in seen] == ids
    assert [(status, done) for _, status, done in seen] == [("running", k) for k in range(5)]


def test_a_batch_settles_after_its_commit_and_arms_the_next_retries(tmp_path: Path) -> None:
    """Failing again, each execution is armed for its next retry; listeners hear each save."""
    store = SQLiteStore(tmp_path / "batch.sqlite3")
    heard: list[str] = []

    def always_fails(params: Any, ctx: ActionContext) -> Any:
        raise ConnectionError("down")

    runner, _ = batch_runner(store, always_fails)
    try:
        with runner:
            wf = workflow(flaky_node(attempts=3, delay=5))
            ids = [runner.start(wf) for _ in range(3)]
            runner.subscribe(heard.append)
            assert runner.scheduler.advance(5) == ids
            assert heard == ids
            pending = runner.scheduler.pending()
            assert [eid for eid, _ in pending] == ids
            assert {due for _, due in pending} == {T0 + timedelta(seconds=10)}
            assert runner.scheduler.advance(5) == ids
            for eid in ids:
                assert runner.get(eid).status is ExecutionStatus.FAILED
    finally:
        store.close()


def test_a_batch_member_cancelled_elsewhere_is_dropped_and_the_rest_go_on(
    tmp_path: Path,
) -> None:
    """One execution cancelled by another process: its fire is a no-op, the others resume."""
    path = tmp_path / "batch.sqlite3"
    store = SQLiteStore(path)
    other = SQLiteStore(path, cache_size=0)
    runner, clock = batch_runner(store, fails_first)
    try:
        with runner:
            wf = workflow(flaky_node(attempts=3, delay=5))
            ids = [runner.start(wf) for _ in range(3)]
            moved, version = other.load(ids[1])
            other.save(cancel_execution(moved, "elsewhere", clock=clock), version)
            assert runner.scheduler.advance(5) == ids
            assert runner.get(ids[0]).status is ExecutionStatus.COMPLETED
            assert runner.get(ids[1]).status is ExecutionStatus.CANCELLED
            assert runner.get(ids[2]).status is ExecutionStatus.COMPLETED
            assert runner.scheduler.pending() == []
    finally:
        store.close()
        other.close()


def test_a_batch_starts_async_sub_workflows_after_its_group(tmp_path: Path) -> None:
    """A parent's sub-workflow alarm in a batch starts its child once the group committed."""
    store = SQLiteStore(tmp_path / "batch.sqlite3")
    clock = ManualClock(T0)
    registry = Registry()

    def pause(params: Any, ctx: ActionContext) -> Any:
        return Suspend("approval", {})

    registry.register("test.pause", pause, lambda params, ctx, data: data)
    child = workflow(Node(key="p", type="test.pause"), wid="child")
    parent = workflow(sub_node("child", "async"), wid="parent")
    runner = Runner(
        registry, store, ManualScheduler(clock, batches=True), workflows=[child, parent]
    )
    try:
        with runner:
            parents = [runner.start(parent) for _ in range(3)]
            runner.scheduler.advance(0)
            children = [row.id for row in store.list(workflow_id="child")]
            assert len(children) == 3
            for eid in parents:
                assert runner.get(eid).status is ExecutionStatus.SUSPENDED
    finally:
        store.close()


@pytest.mark.postgres
def test_a_batch_on_postgres_commits_each_claim_before_its_action(postgres_dsn: str) -> None:
    """A batch on a ``PostgresStore`` group: each action's claim, and the previous step's
    final save, are committed (seen from another connection) when the action runs."""
    group = PostgresGroup(Path("."), postgres_dsn)
    seen: list[tuple[str, str, int]] = []

    def action(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 2:  # the retry, run from the batch
            rows = {row.id: row.status.value for row in group.other.list(limit=100)}
            done = sum(1 for status in rows.values() if status == "completed")
            seen.append((ctx.execution_id, rows[ctx.execution_id], done))
        return fails_first(params, ctx)

    runner, _ = batch_runner(group.store, action)  # type: ignore[arg-type]
    try:
        with runner:
            wf = workflow(flaky_node(attempts=3, delay=5))
            ids = [runner.start(wf) for _ in range(5)]
            assert runner.scheduler.advance(10) == ids
            for eid in ids:
                assert runner.get(eid).status is ExecutionStatus.COMPLETED
            assert {group.other.load(eid)[1] for eid in ids} == {5}
    finally:
        group.close()
    assert [(status, done) for _, status, done in seen] == [("running", k) for k in range(5)]


# -- a batch never holds back an alarm a free thread could run (issue 22, finding 4) -----------


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_long_actions_due_at_one_instant_all_start_at_once(kind: str, tmp_path: Path) -> None:
    """Alarms due at one instant reach the runner as one batch; each of their actions waits
    until all of them have started (a barrier), so they meet only if no batch holds one back
    behind another's action. Before, the batch ran them one after another in one thread:
    the first action waited alone and the barrier broke."""
    from scheduling.stores.memory import MemoryStore

    n = 8
    meet = threading.Barrier(n, timeout=10)
    registry = Registry()
    registry.register("test.meet", lambda params, ctx: meet.wait())
    store = SQLiteStore(tmp_path / "long.db") if kind == "sqlite" else MemoryStore()
    batches: list[int] = []
    runner = Runner(registry, store, APSchedulerAdapter())
    fire_many = runner._fire_many

    def counting(ids: Any) -> Any:
        batches.append(len(ids))
        return fire_many(ids)

    runner._fire_many = counting  # type: ignore[method-assign,assignment]
    wait = Node(
        key="w",
        type="wait.wait",
        params={"mode": "schedule", "schedule_at": "{{ $input.main.at }}"},
    )
    flow = workflow(wait, Node(key="m", type="test.meet"))
    now = datetime.now(UTC)
    due = (now + timedelta(milliseconds=200)).isoformat()
    starter = Runner(registry, store, ManualScheduler(ManualClock(now)))  # its clock stands
    ids = [starter.start(flow, {"at": due}) for _ in range(n)]
    with runner:  # re-arms the n alarms from the store: one instant, one batch
        ended = [runner.wait(eid, timeout=60) for eid in ids]
    store.close()
    assert not meet.broken
    assert [e.status for e in ended] == [ExecutionStatus.COMPLETED] * n
    assert batches[0] == n  # they did come as one batch


# -- a batch whose commit fails after an action ran (issue 22, finding 6) -----------------------


class _FullDisk:
    """A connection whose ``COMMIT`` fails as on a full disk; the rest goes through."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)


class FullDiskStore(SQLiteStore):
    """A ``SQLiteStore`` whose group commits fail while ``full`` is set (and roll back)."""

    full = False

    def commit_group(self) -> None:
        if not self.full:
            super().commit_group()
            return
        conn = self._conn
        self._conn = _FullDisk(conn)  # type: ignore[assignment]
        try:
            super().commit_group()
        finally:
            self._conn = conn


def test_a_batch_whose_commit_failed_keeps_the_outcome_it_lost(tmp_path: Path) -> None:
    """Two retries in one batch: the first's action runs and its save waits in the group;
    the commit before the second's action fails (disk full) and rolls it back. The runner
    keeps that outcome and stores it once the disk has room: no attempt is recorded
    interrupted, no action runs twice."""
    store = FullDiskStore(tmp_path / "full.db")
    clock = ManualClock(T0)
    registry = Registry()
    calls: list[int] = []

    def flaky(params: Any, ctx: ActionContext) -> Any:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("down")
        if len(calls) == 3:  # the batch's first action: the next commit fails
            store.full = True
        return {"ok": True}

    registry.register("test.flaky", flaky)
    scheduler = ManualScheduler(clock, batches=True)
    runner = Runner(registry, store, scheduler, clock)
    with runner:
        ids = [runner.start(workflow(flaky_node())) for _ in range(2)]
        scheduler.advance(1)  # one batch of both retries
        store.full = False
        for _ in range(int(runner.lease_seconds) + 2):  # the worker's loop, every --poll
            clock.advance(1)
            runner.rearm_due()
            scheduler.advance(0)
        ended = [runner.get(eid) for eid in ids]
    store.close()
    assert [e.status for e in ended] == [ExecutionStatus.COMPLETED] * 2
    for one in ended:
        run = one.node("r")
        assert run is not None
        assert [a.number for a in run.attempts] == [1, 2], run.attempts
    assert calls == [1, 1, 2, 2]  # each attempt's action ran once
