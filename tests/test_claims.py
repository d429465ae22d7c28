"""Light claims (``scheduling.abc.ClaimingStore``, ``scheduling._claims``).

A step resuming a retry or a timer claims its execution by the row's columns alone, its
stored record left suspended. These tests hold the store's side (compare-and-set, what a
claimed row reads as), the rule of which records qualify, and that a claimed execution is
recovered, cancelled and renewed exactly as one whose full checkpoint was saved: each
scenario runs over a claiming store and over the same store with claims hidden, and the
final records must be equal.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from doubles import T0, Died, at, fails_first, flaky_node, workflow

from prana import (
    ActionContext,
    AttemptOutcome,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    Registry,
    Suspend,
    TimerData,
    dumps,
    execute_workflow,
)
from prana._engine import Run
from prana.testing import ManualClock
from scheduling import Runner, StaleVersionError
from scheduling._claims import LIGHT_KINDS, claimable, claimed_snapshot, is_claimed, unclaimed
from scheduling._leases import Claim, Leases
from scheduling.abc import ClaimingStore, ExecutionStore
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores._sql import to_micros
from scheduling.stores.memory import MemoryStore
from scheduling.stores.sqlite import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

LEASE = 30.0


class Unclaiming:
    """The same store with ``claim`` hidden: the runner saves full checkpoints over it."""

    def __init__(self, inner: ExecutionStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "claim":
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.fixture(
    params=[
        "sqlite",
        "memory",
        "memory-json",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def claiming(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Makes fresh claiming stores of one kind (closed at the end)."""
    made: list[Any] = []
    schemas: list[str] = []

    def make() -> Any:
        if request.param == "sqlite":
            store: Any = SQLiteStore(tmp_path / f"claims{len(made)}.db")
        elif request.param == "postgres":
            from scheduling.stores.postgres import PostgresStore

            schemas.append(f"prana_claims_{uuid.uuid4().hex[:12]}")
            store = PostgresStore(request.getfixturevalue("postgres_dsn"), schema=schemas[-1])
        else:
            store = MemoryStore(serialize=request.param == "memory-json")
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    if schemas:
        import psycopg
        from psycopg import sql

        with psycopg.connect(request.getfixturevalue("postgres_dsn"), autocommit=True) as conn:
            for schema in schemas:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


def suspended_retry(store: Any, clock: ManualClock) -> tuple[str, int]:
    """Store an execution suspended on a retry (due at ``at(1)``); its id and version."""
    registry = Registry()
    registry.register("test.flaky", fails_first)
    outcome = execute_workflow(workflow(flaky_node()), None, registry=registry, clock=clock)
    assert outcome.execution is not None
    return outcome.execution.id, store.save(outcome.execution, None)


# -- the store's side ------------------------------------------------------------------------


def test_sqlite_and_memory_stores_claim() -> None:
    """Both built-in stores offer light claims (``ClaimingStore``)."""
    assert isinstance(MemoryStore(), ClaimingStore)
    store = SQLiteStore(":memory:")
    try:
        assert isinstance(store, ClaimingStore)
    finally:
        store.close()


def test_a_claimed_row_reads_running_with_its_record_kept(claiming: Callable[[], Any]) -> None:
    """A claim sets status, lease and claim time; the record and its suspension stay."""
    store = claiming()
    clock = ManualClock(T0)
    eid, version = suspended_retry(store, clock)
    before, _ = store.load(eid)
    assert claimable(before, workflow(flaky_node()), Registry())
    assert store.claim(eid, version, at(31), at(1)) == version + 1
    claimed, now = store.load(eid)
    assert now == version + 1
    assert is_claimed(claimed)
    assert claimed.lease_expires_at == claimed.due_at == at(31)
    assert claimed.updated_at == at(1)
    assert claimed.suspension == before.suspension
    assert claimed.node_executions == before.node_executions
    assert store.find_due(at(31)) == [(eid, at(31))]
    assert store.find_due(at(30)) == []
    assert store.alarms() == [(eid, at(31))]
    [row] = store.list()
    assert (row.status, row.version, row.due_at) == (ExecutionStatus.RUNNING, now, at(31))
    # A renewal: the same claim time, a later lease.
    assert store.claim(eid, now, at(41), at(1)) == now + 1
    renewed, _ = store.load(eid)
    assert (renewed.lease_expires_at, renewed.updated_at) == (at(41), at(1))
    # A save ends the claim: the record saved is what is read.
    store.save(before, now + 1)
    assert store.load(eid)[0] == before


def test_the_sqlite_claim_leaves_the_stored_text_as_it_was(sqlite_store: SQLiteStore) -> None:
    """The claim writes the columns only: the JSON document is the suspended one, byte for byte."""
    eid, version = suspended_retry(sqlite_store, ManualClock(T0))

    def row() -> tuple[Any, ...]:
        query = "SELECT data, status, due_at, version FROM prana_executions WHERE id = ?"
        return tuple(sqlite_store._conn.execute(query, (eid,)).fetchone())

    text, status, _, _ = row()
    assert status == "suspended"
    sqlite_store.claim(eid, version, at(31), at(1))
    assert row()[:2] == (text, "running")
    assert row()[3] == version + 1


def _columns(store: SQLiteStore, eid: str) -> tuple[Any, ...]:
    query = "SELECT status, due_at, lease_at FROM prana_executions WHERE id = ?"
    return tuple(store._conn.execute(query, (eid,)).fetchone())


def test_a_sqlite_claim_writes_the_row_alone(sqlite_store: SQLiteStore) -> None:
    """The lease goes in ``lease_at`` and the due time stays, so the claim's commit writes
    one page (the row's), not the due-time index's too; a save clears the lease."""
    eid, version = suspended_retry(sqlite_store, ManualClock(T0))
    conn = sqlite_store._conn
    (_, due, lease) = _columns(sqlite_store, eid)
    assert lease is None
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    sqlite_store.claim(eid, version, at(31), at(1))
    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == 1  # the table's leaf page alone: the index entry did not move
    assert _columns(sqlite_store, eid) == ("running", due, to_micros(at(31)))
    sqlite_store.claim(eid, version + 1, at(41), at(1))  # a renewal moves the lease alone
    assert _columns(sqlite_store, eid) == ("running", due, to_micros(at(41)))
    sqlite_store.save(unclaimed(sqlite_store.load(eid)[0]), version + 2)
    assert _columns(sqlite_store, eid) == ("suspended", due, None)


@pytest.mark.parametrize("due", [None, to_micros(at(90))])
def test_a_sqlite_claim_that_cannot_keep_its_due_time_moves_it(
    sqlite_store: SQLiteStore, due: int | None
) -> None:
    """A row without a due time at or before the lease (edited by hand) gets the lease as
    its due time too, so the index still finds the claim once its lease ends."""
    eid, version = suspended_retry(sqlite_store, ManualClock(T0))
    sqlite_store._conn.execute("UPDATE prana_executions SET due_at = ? WHERE id = ?", (due, eid))
    sqlite_store.claim(eid, version, at(31), at(1))
    assert _columns(sqlite_store, eid) == ("running", to_micros(at(31)), to_micros(at(31)))
    assert sqlite_store.find_due(at(30)) == []
    assert sqlite_store.find_due(at(31)) == [(eid, at(31))]
    assert sqlite_store.alarms() == [(eid, at(31))]


def test_a_running_sqlite_row_without_lease_at_reads_its_lease_from_due_at(
    sqlite_store: SQLiteStore,
) -> None:
    """A ``running`` row without ``lease_at`` (edited by hand) reads, lists and falls due
    at its ``due_at`` as its lease, one time for all three."""
    eid, version = suspended_retry(sqlite_store, ManualClock(T0))
    sqlite_store._conn.execute(
        "UPDATE prana_executions SET status = 'running', due_at = ?, updated_at = ?,"
        " version = version + 1 WHERE id = ?",
        (to_micros(at(31)), to_micros(at(1)), eid),
    )
    claimed, now = sqlite_store.load(eid)
    assert is_claimed(claimed)
    assert (claimed.lease_expires_at, claimed.updated_at, now) == (at(31), at(1), version + 1)
    assert sqlite_store.find_due(at(30)) == []
    assert sqlite_store.find_due(at(31)) == [(eid, at(31))]
    [row] = sqlite_store.list()
    assert row.due_at == at(31)


def test_a_sqlite_lease_column_counts_only_on_a_running_row(sqlite_store: SQLiteStore) -> None:
    """A ``lease_at`` left on a row that is not ``running`` (edited by hand) is ignored:
    the row falls due at its due time."""
    eid, _ = suspended_retry(sqlite_store, ManualClock(T0))
    sqlite_store._conn.execute(
        "UPDATE prana_executions SET lease_at = ? WHERE id = ?", (to_micros(at(31)), eid)
    )
    assert sqlite_store.find_due(at(1)) == [(eid, at(1))]
    assert sqlite_store.alarms() == [(eid, at(1))]
    assert not is_claimed(sqlite_store.load(eid)[0])


def test_a_stale_claim_changes_nothing(claiming: Callable[[], Any]) -> None:
    """A claim on the wrong version (or an unknown id) raises and leaves the row as it was."""
    store = claiming()
    eid, _ = suspended_retry(store, ManualClock(T0))
    before = store.load(eid)
    with pytest.raises(StaleVersionError, match="expected version 7"):
        store.claim(eid, 7, at(31), at(1))
    with pytest.raises(StaleVersionError):
        store.claim("nobody", 1, at(31), at(1))
    assert store.load(eid) == before


def test_a_claim_with_bad_arguments_is_refused(claiming: Callable[[], Any]) -> None:
    """Wrong kinds of arguments fail in one line naming the argument, before anything is written."""
    store = claiming()
    eid, version = suspended_retry(store, ManualClock(T0))
    with pytest.raises(InvalidSettingsError, match="expected_version=0"):
        store.claim(eid, 0, at(31), at(1))
    with pytest.raises(InvalidSettingsError, match="lease_expires_at"):
        store.claim(eid, version, at(31).replace(tzinfo=None), at(1))
    assert store.load(eid)[1] == version


def test_a_grouped_claim_is_durable_only_from_the_commit(tmp_path: Path) -> None:
    """In a SQLite group a claim joins the open transaction, as a save does (PostgreSQL:
    ``test_batches.test_a_postgres_grouped_claim_joins_the_group``)."""
    path = tmp_path / "g.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    try:
        eid, version = suspended_retry(store, ManualClock(T0))
        with store.grouped():
            store.claim(eid, version, at(31), at(1))
            assert store.load(eid)[1] == version + 1  # its own thread sees it
            store.commit_group()
        assert other.load(eid)[1] == version + 1
        assert is_claimed(other.load(eid)[0])
    finally:
        store.close()
        other.close()


# -- which records qualify -------------------------------------------------------------------


def test_only_retries_and_timers_are_claimed_lightly() -> None:
    """The rule: a claim stands for a resume that ignores its data, so retry and timer only.

    If a kind is added to ``LIGHT_KINDS`` this fails: the replay in ``scheduling._claims``
    must then be shown to rebuild that kind's snapshot too.
    """
    assert frozenset({"retry", "timer"}) == LIGHT_KINDS


def recording_registry(store: Any, stored: list[Any]) -> Registry:
    """``test.flaky``: fails node ``r``'s first attempt; each call appends the record stored
    for its execution at that moment (what the step's checkpoint left) to ``stored``."""
    registry = Registry()

    def flaky(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 1 and ctx.node_key == "r":
            raise ConnectionError("down")
        stored.append(store.load(ctx.execution_id)[0])
        return "done"

    registry.register("test.flaky", flaky)
    return registry


@pytest.mark.parametrize(
    ("node", "light"),
    [
        (flaky_node(), True),
        (Node(key="w", type="wait.wait", params={"mode": "interval", "duration": 5}), True),
        (Node(key="w", type="wait.wait", params={"mode": "webhook"}), False),
    ],
)
def test_a_step_claims_lightly_only_a_record_that_qualifies(node: Node, light: bool) -> None:
    """Inside the first action of the resuming step the stored record is a light claim for a
    retry or a timer, and a full checkpoint (no suspension) for a webhook delivery."""
    store = MemoryStore()
    clock = ManualClock(T0)
    seen: list[Any] = []
    registry = recording_registry(store, seen)
    after = Node(key="after", type="test.flaky")
    with Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(workflow(node, after))
        seen.clear()
        if node.params.get("mode") == "webhook":
            runner.deliver(eid, {"ok": True})
        else:
            runner.scheduler.advance(5)
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    assert all(record.status is ExecutionStatus.RUNNING for record in seen)
    assert all(record.lease_expires_at is not None for record in seen)
    assert is_claimed(seen[0]) is light
    assert not any(is_claimed(record) for record in seen[1:])  # later checkpoints: full
    assert len(seen) == (2 if node.key == "r" else 1)


LIGHT_NODES = [
    pytest.param(flaky_node(), id="retry"),
    pytest.param(
        Node(key="w", type="wait.wait", params={"mode": "interval", "duration": 5}), id="timer"
    ),
]


def first_checkpoints(node: Node, store: Any) -> tuple[list[Any], list[Any], int]:
    """Resume ``node``'s pause under a Runner, then ``after``, one action each.

    Inside each action: the stored record and the snapshot a claimed one stands for
    (``claimed_snapshot``); and how many snapshots the core built in the resuming step.
    """
    clock = ManualClock(T0)
    stored: list[Any] = []
    registry = recording_registry(store, stored)
    wf = workflow(node, Node(key="after", type="test.flaky"))
    built = 0
    with Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(wf, execution_id="e1")
        stored.clear()
        snapshot = Run.snapshot

        def counted(run: Run, node_run: Any) -> Any:
            nonlocal built
            built += 1
            return snapshot(run, node_run)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Run, "snapshot", counted)
            runner.scheduler.advance(5)
        assert runner.get(eid).status is ExecutionStatus.COMPLETED
    rebuilt = [claimed_snapshot(r, wf, registry, None, clock) for r in stored if is_claimed(r)]
    return stored, rebuilt, built


@pytest.mark.parametrize("node", LIGHT_NODES)
def test_a_light_claim_builds_no_snapshot(node: Node) -> None:
    """The core builds no snapshot for a light claim (``prana._checkpoint``: taken by the id);
    the step's later checkpoints get theirs, and over a store without claims every one
    does."""
    actions = 2 if node.key == "r" else 1
    stored, _, built = first_checkpoints(node, MemoryStore())
    assert is_claimed(stored[0])
    assert built == actions - 1
    stored, _, built = first_checkpoints(node, Unclaiming(MemoryStore()))
    assert not any(is_claimed(record) for record in stored)
    assert built == actions


@pytest.mark.parametrize("node", LIGHT_NODES)
def test_a_light_claim_stands_for_the_snapshot_a_full_checkpoint_saves(
    claiming: Callable[[], Any], node: Node
) -> None:
    """What a light claim stores, read back (``claimed_snapshot``, as recovery and cancel do),
    is the snapshot a full checkpoint stores at the same point; later records are equal."""
    light, rebuilt, _ = first_checkpoints(node, claiming())
    full, _, _ = first_checkpoints(node, Unclaiming(claiming()))
    assert len(rebuilt) == 1
    assert is_claimed(light[0])
    assert not is_claimed(full[0])
    assert dumps(rebuilt[0]) == dumps(full[0])
    assert [dumps(record) for record in light[1:]] == [dumps(record) for record in full[1:]]


# -- recovery, cancelling, renewing: as with a full checkpoint ------------------------------


def died_in_retry(store: Any, dies: int, max_interruptions: int = 3) -> tuple[Any, list[Any]]:
    """A retry whose second attempt kills its process ``dies`` times; recovered past leases."""
    clock = ManualClock(T0)
    calls: list[Any] = []
    claimed: list[bool] = []

    def fragile(params: Any, ctx: ActionContext) -> Any:
        calls.append((ctx.idempotency_key, ctx.attempt))
        if ctx.attempt == 1:
            raise ConnectionError("down")
        claimed.append(is_claimed(store.load(ctx.execution_id)[0]))
        if len(calls) <= dies + 1:
            raise Died
        return "done"

    registry = Registry()
    registry.register("test.flaky", fragile)

    def runner() -> Runner[ManualScheduler]:
        return Runner(
            registry,
            store,
            ManualScheduler(clock),
            lease_seconds=LEASE,
            max_interruptions=max_interruptions,
        )

    eid = runner().start(workflow(flaky_node()), execution_id="e1")
    clock.advance(1)
    for _ in range(dies + 1):
        try:
            runner().run_due()
        except Died:
            assert store.load(eid)[0].status is ExecutionStatus.RUNNING
            clock.advance(LEASE)
    # The first run of attempt 2 is a light claim's over a claiming store; recoveries save
    # full checkpoints.
    assert not any(claimed[1:])
    assert claimed[0] is isinstance(store, ClaimingStore)
    return store.load(eid)[0], calls


@pytest.mark.parametrize("dies", [1, 2, 5])
def test_a_claimed_retry_that_died_is_recovered_as_a_checkpoint_is(
    claiming: Callable[[], Any], dies: int
) -> None:
    """kill -9 inside a lightly claimed attempt: taken up after the lease, the attempt closed
    interrupted and run again with the same key, counted against max_interruptions; the
    final record equals the one a full checkpoint gives, attempt times included."""
    light, light_calls = died_in_retry(claiming(), dies)
    full, full_calls = died_in_retry(Unclaiming(claiming()), dies)
    assert dumps(light) == dumps(full)
    assert light_calls == full_calls
    assert {key for key, _ in light_calls} == {"e1:r:0"}
    record = light.node("r")
    assert record is not None
    outcomes = [a.outcome for a in record.attempts]
    if dies < 3:
        assert light.status is ExecutionStatus.COMPLETED
        assert outcomes == [
            AttemptOutcome.FAILED,
            *[AttemptOutcome.INTERRUPTED] * dies,
            AttemptOutcome.COMPLETED,
        ]
    else:  # the poison bound: three interruptions in a row, then failed
        assert light.status is ExecutionStatus.FAILED
        assert light.error is not None
        assert light.error.code == "interrupted"
        assert outcomes[1:] == [AttemptOutcome.INTERRUPTED] * 3 + [AttemptOutcome.FAILED]
    assert record.attempts[1].started_at == at(1)  # the claim time, as the checkpoint had


def cancelled_while_claimed(store: Any) -> Any:
    """Cancel from inside the claimed retry attempt; the step's outcome is dropped."""
    clock = ManualClock(T0)
    registry = Registry()
    holder: list[Runner[ManualScheduler]] = []

    def flaky(params: Any, ctx: ActionContext) -> Any:
        if ctx.attempt == 1:
            raise ConnectionError("down")
        holder[0].cancel(ctx.execution_id, "operator")
        return "done"

    registry.register("test.flaky", flaky)
    holder.append(Runner(registry, store, ManualScheduler(clock), lease_seconds=LEASE))
    with holder[0] as runner:
        eid = runner.start(workflow(flaky_node()), execution_id="c1")
        runner.scheduler.advance(1)
        return runner.get(eid)


def test_cancelling_a_claimed_execution_closes_its_attempt_in_flight(
    claiming: Callable[[], Any],
) -> None:
    """A cancel that lands on a light claim cancels the attempt the claim stands for."""
    light = cancelled_while_claimed(claiming())
    assert light.status is ExecutionStatus.CANCELLED
    record = light.node("r")
    assert record is not None
    assert [a.outcome for a in record.attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.CANCELLED,
    ]
    assert dumps(light) == dumps(cancelled_while_claimed(Unclaiming(claiming())))


def test_a_claim_whose_resume_runs_no_action_is_resumed_afresh(
    claiming: Callable[[], Any],
) -> None:
    """A claimed timer whose resume reaches no action call: nothing was interrupted."""
    store = claiming()
    clock = ManualClock(T0)
    wait = Node(key="w", type="wait.wait", params={"mode": "interval", "duration": 5})
    with Runner(Registry(), store, ManualScheduler(clock), lease_seconds=LEASE) as runner:
        eid = runner.start(workflow(wait))
    clock.advance(5)
    _, version = store.load(eid)
    store.claim(eid, version, clock() + timedelta(seconds=LEASE), clock())  # then "died"
    clock.advance(LEASE)
    runner = Runner(Registry(), store, ManualScheduler(clock), lease_seconds=LEASE)
    assert runner.run_due() == [eid]
    done = runner.get(eid)
    assert done.status is ExecutionStatus.COMPLETED
    record = done.node("w")
    assert record is not None
    assert all(a.outcome is not AttemptOutcome.INTERRUPTED for a in record.attempts)


def test_a_light_claim_is_renewed_with_its_claim_time(claiming: Callable[[], Any]) -> None:
    """The keeper renews a light claim by claiming again: later lease, same claim time and
    record; a claim taken over meanwhile stops being renewed."""
    store = claiming()
    clock = ManualClock(T0)
    eid, version = suspended_retry(store, clock)
    suspended, _ = store.load(eid)
    leases = Leases(store, clock, LEASE)
    claim = Claim(version, light=True)
    leases.checkpoint(claim)(suspended)  # the core's snapshot is not what gets stored
    try:
        first, claimed_version = store.load(eid)
        assert is_claimed(first)
        assert first.updated_at == T0
        clock.advance(LEASE / 3)
        leases._renew(claim)
        renewed, renewed_version = store.load(eid)
        assert renewed_version == claimed_version + 1
        assert (renewed.updated_at, renewed.lease_expires_at) == (
            T0,
            clock() + timedelta(seconds=LEASE),
        )
        assert renewed.node_executions == suspended.node_executions
        store.save(suspended, renewed_version)  # taken over: the next renewal loses
        clock.advance(LEASE / 3)
        leases._renew(claim)
        assert claim.claimed is None
        assert store.load(eid)[1] == renewed_version + 1
    finally:
        leases.release(claim)


def test_cancelling_a_claimed_user_timer_runs_its_resume_callback_once() -> None:
    """A user action's own timer with a ``resume`` callback: cancelling the execution
    while its step runs (claimed) does not call the callback a second time."""
    calls: list[str] = []
    registry = Registry()

    def pause(params: Any, ctx: ActionContext) -> Any:
        return Suspend("timer", TimerData(resume_at=ctx.now + timedelta(seconds=5)))

    def on_resume(params: Any, ctx: ActionContext, data: Any) -> Any:
        calls.append(ctx.node_key)  # a side effect: a charge, a message
        return {"charged": True}

    runners: list[Runner[ManualScheduler]] = []

    def cancel_now(params: Any, ctx: ActionContext) -> Any:
        runners[0].cancel(ctx.execution_id)  # a cancel while this step holds the claim
        return 1

    registry.register("u.timer", pause, on_resume)
    registry.register("u.next", cancel_now)
    wf = workflow(Node(key="a", type="u.timer"), Node(key="b", type="u.next"), wid="user-timer")
    clock = ManualClock(T0)
    scheduler = ManualScheduler(clock)
    runner = Runner(registry, MemoryStore(), scheduler, clock)
    runners.append(runner)
    with runner:
        eid = runner.start(wf)
        scheduler.advance(10)
        assert runner.get(eid).status is ExecutionStatus.CANCELLED
    assert calls == ["a"]
