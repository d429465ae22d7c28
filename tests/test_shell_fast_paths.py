"""The runner's and the SQLite store's hot paths keep the rules of the paths they shortcut.

Each fast path of a resume's shell (``scheduling/stores/sqlite.py``, ``scheduling/_leases.py``)
states its rule next to its code; these tests fail when a shortcut stops keeping it: a
driver error inside a hot store method is still a ``StoreError``, the exact-type argument
checks let through only what the full checks let through and store the same values, and a
claim held while the lease keeper stops is still renewed.
"""

from __future__ import annotations

import sys
import threading
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from doubles import T0

from prana import (
    ActionContext,
    AttemptOutcome,
    Connection,
    ExecutionStatus,
    InvalidSettingsError,
    Node,
    NodeSettings,
    NodeStatus,
    Registry,
    RetryPolicy,
    Workflow,
    _model,
    _state,
)
from prana.testing import ManualClock
from scheduling import Runner, StoreError
from scheduling._leases import Claim, Leases
from scheduling.adapters.manual import ManualScheduler
from scheduling.stores._sql import to_micros
from scheduling.stores.sqlite import SQLiteStore
from scheduling.testing import retry

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

DUE = T0 + timedelta(seconds=5)


def saved_retry(store: SQLiteStore, eid: str = "e1") -> int:
    """A suspended retry stored in ``store``; its version."""
    return store.save(retry(eid, DUE), None)


HOT: dict[str, Callable[[SQLiteStore], Any]] = {
    "load": lambda store: store.load("e1"),
    "claim": lambda store: store.claim("e1", 1, DUE + timedelta(seconds=30), DUE),
    "save": lambda store: store.save(retry("e1", DUE), 1),
    "insert": lambda store: store.save(retry("e2", DUE), None),
}


@pytest.mark.parametrize("name", list(HOT))
def test_a_driver_error_in_a_hot_method_is_a_store_error(tmp_path: Path, name: str) -> None:
    """``load``, ``claim`` and ``save`` of a closed store raise ``StoreError``, not sqlite3's."""
    store = SQLiteStore(tmp_path / "hot.db")
    saved_retry(store)
    store.close()
    with pytest.raises(StoreError, match="closed") as caught:
        HOT[name](store)
    assert type(caught.value.__cause__).__module__ == "sqlite3"


def test_a_failed_group_commit_is_a_store_error_and_frees_the_store(tmp_path: Path) -> None:
    """``commit_group`` turns a driver error into ``StoreError`` and gives the lock back."""
    store = SQLiteStore(tmp_path / "group.db")
    saved_retry(store)

    def group_whose_commit_fails() -> None:
        with store.grouped():
            store.claim("e1", 1, DUE + timedelta(seconds=30), DUE)  # opens the group
            store._conn.close()  # the driver fails the commit that ends the block

    with pytest.raises(StoreError, match="closed"):
        group_whose_commit_fails()
    taken = threading.Event()

    def other_thread() -> None:
        with store._lock:  # would block forever if the failed commit kept the lock
            taken.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(timeout=30)
    assert taken.is_set()


def test_a_save_without_a_due_time_writes_the_row_the_full_update_writes(tmp_path: Path) -> None:
    """A record that ended is stored with no due time or lease, found due by nobody."""
    store = SQLiteStore(tmp_path / "undue.db")
    saved_retry(store)
    assert store.claim("e1", 1, DUE + timedelta(seconds=30), DUE) == 2
    done = attrs.evolve(
        retry("e1", DUE), status=ExecutionStatus.COMPLETED, suspension=None, suspended_node=None
    )
    assert done.due_at is None
    assert store.save(done, 2) == 3
    row = store._conn.execute(
        "SELECT status, due_at, lease_at, version FROM prana_executions WHERE id = 'e1'"
    ).fetchone()
    assert row == ("completed", None, None, 3)
    assert store.load("e1") == (done, 3)
    assert store.find_due(DUE + timedelta(days=1)) == []
    again = retry("e1", DUE + timedelta(seconds=1))  # a due time again: the other statement
    assert store.save(again, 3) == 4
    assert store.find_due(DUE + timedelta(days=1)) == [("e1", DUE + timedelta(seconds=1))]


AWARE = [
    T0,
    T0.astimezone(timezone(timedelta(hours=5, minutes=30))),
    T0.astimezone(timezone(timedelta(hours=-7))),
]


@pytest.mark.parametrize("lease", AWARE, ids=["utc", "plus-5:30", "minus-7"])
def test_a_claim_stores_the_same_instant_whatever_the_zone(tmp_path: Path, lease: Any) -> None:
    """A lease in another zone (the full check's path) is stored as the same instant as UTC."""
    store = SQLiteStore(tmp_path / "zones.db")
    saved_retry(store)
    lease = lease + timedelta(seconds=30)
    assert store.claim("e1", 1, lease, lease - timedelta(seconds=30)) == 2
    stored = store._conn.execute("SELECT lease_at FROM prana_executions").fetchone()[0]
    assert stored == to_micros(T0 + timedelta(seconds=30))
    claimed, version = store.load("e1")
    assert (claimed.status, version) == (ExecutionStatus.RUNNING, 2)
    assert claimed.lease_expires_at == T0 + timedelta(seconds=30)


REFUSED_CLAIMS: dict[str, tuple[Any, Any, Any, Any]] = {
    "naive-lease": ("e1", 1, datetime(2030, 1, 1), DUE),  # noqa: DTZ001 - the point
    "naive-claim-time": ("e1", 1, DUE, datetime(2030, 1, 1)),  # noqa: DTZ001 - the point
    "bool-version": ("e1", True, DUE, DUE),
    "zero-version": ("e1", 0, DUE, DUE),
    "id-not-str": (1, 1, DUE, DUE),
    "lease-a-date": ("e1", 1, DUE.date(), DUE),
}


@pytest.mark.parametrize("args", list(REFUSED_CLAIMS.values()), ids=list(REFUSED_CLAIMS))
def test_the_fast_claim_check_refuses_what_the_full_check_refuses(
    tmp_path: Path, args: tuple[Any, Any, Any, Any]
) -> None:
    """Arguments the exact-type check does not pass go through ``check_claim`` and are refused."""
    store = SQLiteStore(tmp_path / "refused.db")
    saved_retry(store)
    with pytest.raises(InvalidSettingsError, match="claim"):
        store.claim(*args)
    assert store.load("e1")[1] == 1  # nothing written


@pytest.mark.parametrize("version", [True, 0, -1, 1.0, "1"], ids=repr)
def test_the_fast_save_check_refuses_what_the_full_check_refuses(
    tmp_path: Path, version: Any
) -> None:
    """A version the exact-type check does not pass goes through ``check_save`` and is refused."""
    store = SQLiteStore(tmp_path / "refused.db")
    saved_retry(store)
    with pytest.raises(InvalidSettingsError, match="expected_version"):
        store.save(retry("e1", DUE), version)
    assert store.load("e1")[1] == 1


class _Stop(Exception):  # noqa: N818 - ends the keeper loop the test drives
    pass


def test_a_claim_held_while_the_keeper_stops_is_still_renewed() -> None:
    """A claim held between the keeper finding nothing held and its stopping keeps a keeper.

    The keeper loop runs in this thread; the hold happens inside its first look at the held
    claims (the moment another thread's ``_hold`` could come in), after the keeper found
    them empty and before it says it stopped.
    """
    leases = Leases(store=None, clock=lambda: T0, lease_seconds=30.0)  # type: ignore[arg-type]
    claim = Claim(1)
    this_keeper = threading.current_thread()
    leases._keeper = this_keeper  # the keeper is running (this thread plays it)

    class HeldLate(dict[int, Claim]):
        looks = 0

        def __len__(self) -> int:
            HeldLate.looks += 1
            if HeldLate.looks == 1:  # found empty; then the step holds its claim
                size = super().__len__()
                leases._hold(claim)  # sees a keeper running: starts none
                return size
            return super().__len__()

    leases._held = HeldLate()
    renewed: list[Claim] = []
    waits = iter([None])

    def wait(timeout: float | None = None) -> bool:
        if next(waits, _Stop) is _Stop:
            raise _Stop
        return True

    leases._cond.wait = wait  # type: ignore[method-assign]
    leases._renew = renewed.append  # type: ignore[method-assign,assignment]
    with pytest.raises(_Stop):
        leases._keep()
    assert renewed == [claim]
    assert leases._keeper is this_keeper


def _fails_first(params: Any, ctx: ActionContext) -> Any:
    """Fail the first attempt; the retry succeeds."""
    if ctx.attempt == 1:
        raise ConnectionError("down")
    return ctx.attempt


STATUS_ENUMS = (ExecutionStatus, NodeStatus, AttemptOutcome)


def test_the_status_constants_are_the_members_they_name() -> None:
    """``prana._state``'s ``EXEC_``/``NODE_``/``ATTEMPT_`` names are the enum members."""
    prefixes = {"EXEC": ExecutionStatus, "NODE": NodeStatus, "ATTEMPT": AttemptOutcome}
    names = [
        name
        for name in vars(_state)
        if name.split("_", 1)[0] in prefixes
        and name.split("_", 1)[1] in prefixes[name.split("_", 1)[0]].__members__
    ]
    assert len(names) >= 9
    for name in names:
        prefix, member = name.split("_", 1)
        assert getattr(_state, name) is prefixes[prefix][member], name
    assert _model._SUSPENDED is ExecutionStatus.SUSPENDED
    assert _model._RUNNING is ExecutionStatus.RUNNING


@pytest.mark.parametrize("kind", ["retry", "timer"])
def test_a_resume_step_reads_no_status_member_off_its_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A Runner step resuming a due retry or timer reads statuses only as module constants.

    On Python 3.11 ``ExecutionStatus.RUNNING`` goes through the enum class's slow attribute
    hook (~850 instructions a read); the hot path names them through ``prana._state``.
    """
    reg = Registry()
    reg.register("test.fails_first", _fails_first)
    reg.register("test.noop", lambda params, ctx: None)
    due = T0 + timedelta(seconds=5)
    if kind == "retry":
        policy = RetryPolicy(max_attempts=2, backoff="constant", initial_delay=5)
        node = Node(key="r", type="test.fails_first", settings=NodeSettings(retry=policy))
        wf = Workflow(
            id="wf",
            nodes=(Node(key="start", type="manual.trigger"), node),
            connections=(Connection(from_node="start", to_node="r"),),
        )
    else:
        wait = {"mode": "schedule", "schedule_at": "{{ $input.main.at }}"}
        wf = Workflow(
            id="wf",
            nodes=(
                Node(key="start", type="manual.trigger"),
                Node(key="wait", type="wait.wait", params=wait),
                Node(key="after", type="test.noop"),
            ),
            connections=(
                Connection(from_node="start", to_node="wait"),
                Connection(from_node="wait", to_node="after"),
            ),
        )
    clock = ManualClock(T0)
    scheduler = ManualScheduler(clock)
    store = SQLiteStore(tmp_path / "steps.db")
    reads: list[str] = []
    read = type.__getattribute__

    def counting(cls: type[Any], name: str) -> Any:
        if cls in STATUS_ENUMS and not name.startswith("_"):
            reads.append(f"{cls.__name__}.{name} in {sys._getframe(1).f_code.co_name}")
        return read(cls, name)

    try:
        with Runner(reg, store, scheduler, clock=clock) as runner:
            eid = runner.start(wf, {"at": due.isoformat()})
            assert runner.get(eid).status is ExecutionStatus.SUSPENDED
            monkeypatch.setattr(type(ExecutionStatus), "__getattribute__", counting)
            assert scheduler.advance(5) == [eid]
            monkeypatch.undo()
            assert runner.get(eid).status is ExecutionStatus.COMPLETED
    finally:
        store.close()
    assert reads == []


def test_the_per_thread_state_a_step_reads_has_defaults_on_any_thread(tmp_path: Path) -> None:
    """A thread that never grouped nor batched reads the defaults (class attributes, so the
    hot path's plain reads never make and discard an ``AttributeError``)."""
    store = SQLiteStore(tmp_path / "local.db")
    try:
        with Runner(Registry(), store, ManualScheduler(ManualClock(T0))) as runner:
            seen: list[Any] = []

            def read() -> None:
                local = runner._local
                seen.extend((local.batch, local.queue, store._grouping.depth))
                seen.append(sorted(vars(local)) + sorted(vars(store._grouping)))

            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
    finally:
        store.close()
    assert seen == [None, None, 0, []]
